"""Brute-force reference for the pandas capture's cell lineage, with row ids carried by hand.

A test runs the same pandas calls as the captured function on frames that carry their row ids
in extra columns (``_r``, ``_l``...), then says per output cell which input cells it comes
from. :func:`check` compares those pairs, cell by cell, with the decompressed ProvRC tables
of the capture, for one input and one relation.
"""

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

Pair = tuple[int, int, int, int]


def got_pairs(cap: Any, input: int | str, *, considered: bool) -> set[Pair]:
    rel = cap.relation(input, considered=considered)
    return {tuple(p) for p in rel.unique().pairs().tolist()}  # type: ignore[misc]


def check(cap: Any, input: int | str, want: Iterable[Pair], *, considered: bool) -> None:
    got = got_pairs(cap, input, considered=considered)
    w = set(want)
    if got != w:
        msg = (
            f"lineage differs for input {input!r} (considered={considered}):\n"
            f"  missing: {sorted(w - got)[:20]}\n  extra:   {sorted(got - w)[:20]}"
        )
        raise AssertionError(msg)


def rid(v: Any) -> int | None:
    """A carried row id, or ``None`` (a row the side does not have)."""
    return None if pd.isna(v) else int(v)


def with_ids(df: pd.DataFrame, name: str = "_r") -> pd.DataFrame:
    return df.assign(**{name: np.arange(len(df))})


def col(df: pd.DataFrame, label: Any) -> int:
    return int(df.columns.get_loc(label))  # type: ignore[arg-type]
