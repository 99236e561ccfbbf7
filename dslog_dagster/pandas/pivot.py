"""``pivot_table`` on a tracked pandas frame: the group-by rule over (index keys, column key).

``df.pivot_table(values="v", index=keys, columns="c", aggfunc=name)`` runs for real (values
equal plain pandas). Each input row is then placed by its labels: its index keys find its
output row in the result's index and its ``c`` value its output column (``-1``: a row pandas
left out — a null key, or a row or column dropped because all its values were null). Output
cell ``(g, j)`` pools the input rows with both, and follows the group-by rule
(:mod:`dslog_dagster.pandas.aggregate`):

* *contributing*: by the function — the members' non-null ``v`` cells for ``sum``/``mean``/...,
  the cells equal to the result for ``min``/``max`` (every tied cell), the first/last non-null
  cell for ``first``/``last``, none for ``count``;
* *considered*: every member's ``v`` cell; and, for every cell of output row ``g`` (an empty
  cell too), the index key cells and ``c`` cells of every input row of the row group, and
  what those rows considered already (filters before). The key cells decided where each value
  went, and that a cell is empty;
* the index (the keys, as pandas returns them) is contributed by every member's key cells, as
  a group-by's keys are; ``reset_index()`` makes them columns.

A single ``values`` column, a single ``columns`` key and a function name are supported;
``margins``, ``fill_value`` and lists of functions are refused.
"""

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import pandas as pd

from dslog_dagster.pandas.aggregate import ENDS, FUNCS, PICK, end_members
from dslog_dagster.pandas.frame import TrackedDataFrame, check_labels
from dslog_dagster.pandas.rows import I64, RowMap
from dslog_dagster.pandas.rules import register
from dslog_dagster.pandas.series import refuse
from dslog_dagster.pandas.state import ColumnLineage, FrameState, Pairs

__all__ = ["pivot_table"]

_OP = "DataFrame.pivot_table"


def _labels(frame: TrackedDataFrame, v: Any, what: str) -> list[Hashable]:
    keys = list(v) if isinstance(v, list | tuple) else [v]
    for k in keys:
        if k not in frame.columns:
            refuse(_OP, f"{what} `{k}` is not a column of the frame")
    return keys


def _positions(labels: pd.Index, keys: list[np.ndarray]) -> I64:
    """Per input row, the position of its key (tuple) in ``labels``; ``-1``: not there."""
    if len(keys) == 1:
        got = labels.get_indexer(pd.Index(keys[0]))
    else:
        got = labels.get_indexer(pd.MultiIndex.from_arrays(keys))
    return np.asarray(got, np.int64)


def _members(func: str, vals: pd.Series, cell: I64, picked: np.ndarray) -> np.ndarray:
    """Which member rows (``cell >= 0``) contribute to their cell's value."""
    notnull = np.asarray(vals.notna().to_numpy(), bool)
    inside = cell >= 0
    if func == "count":
        return np.zeros(cell.size, bool)
    if func in PICK:
        equal = np.zeros(cell.size, bool)
        equal[inside] = np.asarray(vals.to_numpy()[inside] == picked[cell[inside]], bool)
        return np.asarray(inside & notnull & equal, bool)
    if func in ENDS:
        return end_members(inside & notnull, cell, last=func == "last")
    return np.asarray(inside & notnull, bool)


def _pooling(row: I64, members: I64, n_out: int) -> Callable[[RowMap], RowMap]:
    """Output row ``row[r]`` pools input row ``r`` for each ``r`` in ``members``."""
    return lambda m: m.gather(row[members], members, n_out)


def pivot_table(
    frame: TrackedDataFrame,
    values: Any = None,
    index: Any = None,
    columns: Any = None,
    aggfunc: Any = "mean",
    fill_value: Any = None,
    margins: bool = False,
    dropna: bool = True,
    **kw: Any,
) -> TrackedDataFrame:
    """``frame.pivot_table(...)``; see the module docstring."""
    if kw or margins or fill_value is not None or not dropna:
        refuse(_OP, "margins=, fill_value=, dropna=False or other options")
    if values is None or isinstance(values, list | tuple) or columns is None or index is None:
        refuse(_OP, "anything but one `values` column, `index` keys and one `columns` key")
    if not isinstance(aggfunc, str) or aggfunc not in FUNCS:
        refuse(_OP, f"the function {aggfunc!r} (supported: {sorted(FUNCS)})")
    df = frame.plain
    idx_keys = _labels(frame, index, "index")
    (col_key,) = _labels(frame, columns, "columns")
    _labels(frame, values, "values")
    res = df.pivot_table(values=values, index=index, columns=columns, aggfunc=aggfunc)
    check_labels(res, _OP)
    if isinstance(res.columns, pd.MultiIndex) or not isinstance(res, pd.DataFrame):
        refuse(_OP, "a result whose columns are not one level of the `columns` key")
    n_out, n_cols = res.shape
    row = _positions(res.index, [df[k].to_numpy() for k in idx_keys])
    col = _positions(res.columns, [df[col_key].to_numpy()])
    placed = (row >= 0) & (col >= 0)
    cell = np.where(placed, row * max(n_cols, 1) + col, -1).astype(np.int64)
    st = frame.lineage_state
    ctx = st.ctx
    vlin = st.columns[df.columns.get_loc(values)]
    flat = np.asarray(res.to_numpy(dtype=object), dtype=object).reshape(-1)
    picked = flat if aggfunc in PICK else np.zeros(0, dtype=object)
    contributes = _members(aggfunc, df[values], cell, picked)
    cols = []
    for j in range(n_cols):
        mem = np.flatnonzero(placed & (col == j)).astype(np.int64)
        use = mem[contributes[mem]]
        move_all = ctx.remap(_pooling(row, mem, n_out))
        move_c = ctx.remap(_pooling(row, use, n_out))
        contrib: Pairs = frozenset((move_c(s), c) for s, c in vlin.contrib)
        cols.append(ColumnLineage(contrib, frozenset((move_all(s), c) for s, c in vlin.full())))
    # every input row of a row group placed the group's cells (an empty one too)
    in_group = np.flatnonzero(row >= 0).astype(np.int64)
    move_g = ctx.remap(lambda m: m.gather(row[in_group], in_group, n_out))
    keys = [st.columns[df.columns.get_loc(k)] for k in idx_keys]
    key_pairs: Pairs = st.columns[df.columns.get_loc(col_key)].full()
    for kl in keys:
        key_pairs |= kl.full()
    row_consid = frozenset((move_g(s), c) for s, c in st.row_consid | key_pairs)
    index_lins = tuple(
        ColumnLineage(
            frozenset((move_g(s), c) for s, c in kl.contrib),
            frozenset((move_g(s), c) for s, c in kl.consid),
        )
        for kl in keys
    )
    state = FrameState(ctx, n_out, tuple(cols), row_consid, sources=st.sources, index=index_lins)
    return TrackedDataFrame(res, state)


register("pivot_table", pivot_table)
