"""The two lineage tables that need no pairs: nothing, and everything.

Frame captures (Spark and pandas) need them for an input an output does not depend on and for
a flagged all-to-all step; both are one ProvRC row at most, whatever the shapes.
"""

import numpy as np

from dslog_dagster.core.provrc import LineageTable

__all__ = ["empty_table", "flagged_table", "full_table"]


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
    """Every output cell ← every input cell (one ProvRC row; none when either is empty)."""
    return LineageTable.all_to_all(out_shape, in_shape)


def flagged_table(
    out_shape: tuple[int, ...], in_shape: tuple[int, ...], *, source: bool
) -> LineageTable:
    """A flagged step's table for one input: all-to-all when the output came from that input
    (``source``), else nothing."""
    return full_table(out_shape, in_shape) if source else empty_table(out_shape, in_shape)
