"""Brute-force reference for the Spark capture's cell lineage, with ids propagated by hand.

The test inputs carry an ``id`` column equal to their row id; each test says, for an output
row (as a dict of its values, collected from the tiny output) and one output column, which
input rows and columns the cell comes from. :func:`expected_relation` turns that into the
relation the capture must produce, cell pair by cell pair.
"""

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from dslog_dagster.core import LineageRelation
from dslog_dagster.spark import ROW_ID

Rule = Callable[[dict[str, Any], str], Iterable[tuple[int, str]]]


def output_rows(cap: Any) -> list[dict[str, Any]]:
    """The output rows (by row id) as dicts (tests use tiny frames)."""
    rows = [r.asDict(recursive=True) for r in cap.frame_with_row_id.collect()]
    return sorted(rows, key=lambda r: r[ROW_ID])


def expected_relation(cap: Any, input: int | str, rule: Rule) -> LineageRelation:
    inp = (
        cap.inputs[input]
        if isinstance(input, int)
        else next(i for i in cap.inputs if i.name == input)
    )
    pairs = []
    for row in output_rows(cap):
        o = row[ROW_ID]
        for j, col in enumerate(cap.columns):
            for r, c in rule(row, col):
                pairs.append((o, j, r, inp.columns.index(c)))
    arr = np.asarray(pairs, np.int64).reshape(-1, 4)
    return LineageRelation.from_pairs(cap.shape, inp.shape, arr[:, :2], arr[:, 2:])


def assert_lineage(cap: Any, input: int | str, rule: Rule, *, considered: bool = False) -> None:
    got = cap.relation(input, considered=considered)
    want = expected_relation(cap, input, rule)
    if got != want:
        g = {tuple(p) for p in got.unique().pairs().tolist()}
        w = {tuple(p) for p in want.unique().pairs().tolist()}
        msg = (
            f"lineage differs for input {input!r} (considered={considered}):\n"
            f"  missing: {sorted(w - g)[:20]}\n  extra:   {sorted(g - w)[:20]}\n"
            f"  columns: {cap.columns}"
        )
        raise AssertionError(msg)


def same_lineage(auto: Any, lists: Any) -> None:
    """``auto``'s relations equal ``lists``' (rows matched by value, see :func:`both`)."""
    assert auto.columns == lists.columns

    def values(cap: Any) -> list[tuple[Any, ...]]:
        return [tuple(v for k, v in r.items() if k != ROW_ID) for r in output_rows(cap)]

    a, b = values(auto), values(lists)
    assert sorted(a, key=repr) == sorted(b, key=repr)
    if len(set(a)) == len(a):
        where = {row: i for i, row in enumerate(a)}
        renumber = np.asarray([where[row] for row in b], np.int64)
    else:  # repeated rows cannot be matched: the outputs must be in the same order
        assert a == b
        renumber = np.arange(len(a), dtype=np.int64)
    for inp in auto.inputs:
        for considered in (False, True):
            got = lists.relation(inp.name, considered=considered)
            moved = LineageRelation(
                got.out_shape,
                got.in_shape,
                np.stack([renumber[got.out_cols[0]], got.out_cols[1]]),
                got.in_cols,
                got.out_cols.shape[1],
            )
            assert auto.relation(inp.name, considered=considered) == moved
