"""The two lineage tables that need no pairs: nothing, and everything.

Frame captures (Spark and pandas) need them for an input an output does not depend on and for
a flagged all-to-all step; both are one ProvRC row at most, whatever the shapes.
"""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.provrc import LineageTable

__all__ = ["empty_table", "full_table"]


def empty_table(out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> LineageTable:
    """A table with no pairs."""
    l, m = len(out_shape), len(in_shape)
    out_z, in_z = np.zeros((l, 0), np.int64), np.zeros((m, 0), np.int64)
    return LineageTable(
        out_shape=out_shape,
        in_shape=in_shape,
        encoding="provrc",
        rows=0,
        n_pairs=0,
        out_lo=out_z,
        out_hi=out_z,
        in_ref=in_z,
        in_q=in_z,
        in_r=in_z,
        in_mult=in_z,
        in_lo=in_z,
        in_hi=in_z,
    )


def full_table(out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> LineageTable:
    """Every output cell ← every input cell (one ProvRC row)."""
    if 0 in out_shape or 0 in in_shape:
        return empty_table(out_shape, in_shape)
    l, m = len(out_shape), len(in_shape)

    def col(values: Sequence[int], k: int) -> npt.NDArray[np.int64]:
        return np.asarray(values, np.int64).reshape(k, 1)

    n = int(np.prod(out_shape)) * int(np.prod(in_shape))
    return LineageTable(
        out_shape=out_shape,
        in_shape=in_shape,
        encoding="provrc",
        rows=1,
        n_pairs=n,
        out_lo=col([0] * l, l),
        out_hi=col([d - 1 for d in out_shape], l),
        in_ref=col([-1] * m, m),
        in_q=col([1] * m, m),
        in_r=col([0] * m, m),
        in_mult=col([1] * m, m),
        in_lo=col([0] * m, m),
        in_hi=col([d - 1 for d in in_shape], m),
    )
