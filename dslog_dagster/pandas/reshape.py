"""Lineage rules that reshape a tracked pandas frame: ``get_dummies``, ``drop_duplicates`` and a
row-wise ``apply``.

* ``get_dummies``: the columns it does not encode keep their lineage; each indicator column
  made from column ``c`` takes ``c``'s lineage (cell ``(k, c_v)`` is computed from cell
  ``(k, c)`` alone). pandas' own call makes the values; the block of indicators per encoded
  column is measured by encoding that column alone (the last block is what is left), and the
  widths must add up.
* ``drop_duplicates``: the rows pandas kept (found with positions as labels); each kept row
  considered the compared cells (``subset``) of every row of its duplicate group — they
  decided that this row is the one kept.
* ``explode(column)``: each generated row takes the lineage of the row it came from; the
  exploded cell comes from the list cell it was an element of (and, for a ``split``'s tokens,
  from that token's characters).
* ``melt(id_vars, value_vars)``: row ``b·n + i`` is row ``i`` of block ``b``; its id cells come
  from row ``i``'s, its value from row ``i``'s cell of the ``b``-th value column, and the
  ``variable`` column holds column names (literals).
* ``stack()``: the series of the non-null cells (all cells with ``dropna=False`` or
  ``future_stack=True``), row by row; entry ``k`` is cell ``(i, j)`` of the frame and takes
  that cell's lineage. Its index is the frame's row labels (with their lineage, when the index
  holds cells) and the column names (literals). The positions are derived from the null mask
  and checked against the index pandas built, so a pandas version that orders or drops
  differently is refused rather than mislabelled.
* ``apply(func, axis=1)`` returning one value per row: ``func`` is opaque, so each result cell
  is recorded as contributed by every cell of its row and the capture is flagged.
"""

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from dslog_dagster.pandas.char_segments import is_text, select_tokens
from dslog_dagster.pandas.frame import TrackedDataFrame, _positions_of, check_labels
from dslog_dagster.pandas.rows import ranges
from dslog_dagster.pandas.rules import register
from dslog_dagster.pandas.series import TrackedSeries, refuse
from dslog_dagster.pandas.state import NO_LINEAGE, ColumnLineage, Pairs
from dslog_dagster.pandas.strings import token_rows

__all__ = ["apply_rows", "drop_duplicates", "get_dummies", "stack"]

_ENCODED = ["object", "string", "category"]
"""The dtypes ``pd.get_dummies`` encodes when no ``columns`` are given."""


def get_dummies(
    data: TrackedDataFrame | TrackedSeries,
    prefix: Any = None,
    prefix_sep: Any = "_",
    dummy_na: bool = False,
    columns: Any = None,
    sparse: bool = False,
    drop_first: bool = False,
    dtype: Any = None,
) -> TrackedDataFrame:
    """``pd.get_dummies`` of a tracked frame; see the module docstring."""
    op = "pandas.get_dummies"
    if sparse:
        refuse(op, "sparse=True")
    if isinstance(data, TrackedSeries):  # every indicator from the series' cell of its row
        value = pd.get_dummies(
            data.plain, prefix=prefix, prefix_sep=prefix_sep, dummy_na=dummy_na,
            drop_first=drop_first, dtype=dtype,
        )  # fmt: skip
        check_labels(value, op)
        state = data.frame_state.with_columns([data.lineage] * value.shape[1])
        return TrackedDataFrame(value, state)
    df = data.plain
    value = pd.get_dummies(
        df, prefix=prefix, prefix_sep=prefix_sep, dummy_na=dummy_na, columns=columns,
        drop_first=drop_first, dtype=dtype,
    )  # fmt: skip
    check_labels(value, op)
    encoded = (
        list(columns) if columns is not None else list(df.select_dtypes(include=_ENCODED).columns)
    )
    st = data.lineage_state
    lin = {c: st.columns[j] for j, c in enumerate(df.columns)}
    cols = [lin[c] for c in df.columns if c not in encoded]
    for i, c in enumerate(encoded):
        if i == len(encoded) - 1:  # the last block: the columns left (no second encoding)
            width = value.shape[1] - len(cols)
        else:
            width = pd.get_dummies(df[[c]], dummy_na=dummy_na, drop_first=drop_first).shape[1]
        cols.extend([lin[c]] * max(width, 0))
    if len(cols) != value.shape[1]:
        refuse(op, "indicator columns dslog cannot trace to their source columns")
    return TrackedDataFrame(value, st.with_columns(cols))


def drop_duplicates(
    frame: TrackedDataFrame, subset: Any, keep: Any, ignore_index: bool
) -> TrackedDataFrame:
    """``frame.drop_duplicates(subset, keep=keep)``; see the module docstring."""
    df = frame.plain
    cols = (
        list(df.columns)
        if subset is None
        else ([subset] if not isinstance(subset, list | tuple) else list(subset))
    )
    res, positions = _positions_of(df, lambda d: d.drop_duplicates(subset=subset, keep=keep))
    if ignore_index:
        res = res.reset_index(drop=True)
    st = frame.lineage_state
    codes = np.asarray(df.groupby(cols, dropna=False, sort=False).ngroup().to_numpy(), np.int64)
    order = np.argsort(codes, kind="stable").astype(np.int64)
    counts_all = np.bincount(codes, minlength=int(codes.max()) + 1 if codes.size else 0).astype(
        np.int64
    )
    starts_all = (np.cumsum(counts_all) - counts_all).astype(np.int64)
    g = codes[positions]
    counts = counts_all[g]
    out = np.repeat(np.arange(positions.size, dtype=np.int64), counts)
    rows = order[ranges(starts_all[g], counts)]
    move = st.ctx.remap(lambda m: m.gather(out, rows, int(positions.size)))
    compared: Pairs = frozenset()
    for c in cols:
        compared |= st.columns[df.columns.get_loc(c)].full()
    after = st.rows_taken(positions).considering((move(s), c) for s, c in compared)
    return TrackedDataFrame(res, after)


def explode(frame: TrackedDataFrame, column: Any, ignore_index: bool = False) -> TrackedDataFrame:
    """``frame.explode(column)``; see the module docstring."""
    res, positions = _positions_of(frame.plain, lambda d: d.explode(column))
    if ignore_index:
        res = res.reset_index(drop=True)
    check_labels(res, "DataFrame.explode")
    st = frame.lineage_state.rows_taken(positions)
    segs = st.ctx.segments
    if segs is None:
        return TrackedDataFrame(res, st)
    # a split's list cell: the new row keeps the characters of its own token only
    token = token_rows(positions)
    rows = np.arange(positions.size, dtype=np.int64)
    cols = list(st.columns)
    for c in [column] if not isinstance(column, list | tuple) else list(column):
        j = frame.plain.columns.get_loc(c)
        lin = cols[j]
        if lin.chars is not None and not is_text(frame.plain[c]):
            chars = select_tokens(segs, st.ctx.slots, lin.chars, rows, token)
            cols[j] = ColumnLineage(lin.contrib, lin.consid, chars)
    return TrackedDataFrame(res, st.with_columns(cols))


def melt(
    frame: TrackedDataFrame,
    id_vars: Any = None,
    value_vars: Any = None,
    var_name: Any = None,
    value_name: Any = "value",
) -> TrackedDataFrame:
    """``frame.melt(...)``; see the module docstring."""
    op = "DataFrame.melt"
    df = frame.plain
    ids = (
        []
        if id_vars is None
        else ([id_vars] if not isinstance(id_vars, list | tuple) else list(id_vars))
    )
    if value_vars is None:
        values = [c for c in df.columns if c not in ids]
    else:
        values = [value_vars] if not isinstance(value_vars, list | tuple) else list(value_vars)
    res = df.melt(id_vars=id_vars, value_vars=value_vars, var_name=var_name, value_name=value_name)
    check_labels(res, op)
    n, b = len(df), len(values)
    if res.shape != (n * b, len(ids) + 2):
        refuse(op, "a result dslog cannot line up with its rows")
    st = frame.lineage_state
    moved = st.rows_taken(np.tile(np.arange(n, dtype=np.int64), b))
    pos = {c: j for j, c in enumerate(df.columns)}
    value = NO_LINEAGE
    block = np.repeat(np.arange(b), n)
    for k, c in enumerate(values):
        value = value.union(moved.restricted(moved.columns[pos[c]], block == k))
    cols = [moved.columns[pos[c]] for c in ids] + [NO_LINEAGE, value]
    return TrackedDataFrame(res, moved.with_columns(cols))


def stack(frame: TrackedDataFrame, level: Any = -1, **kw: Any) -> TrackedSeries:
    """``frame.stack()``; see the module docstring."""
    op = "DataFrame.stack"
    df = frame.plain
    if level not in (-1, 0) or isinstance(df.columns, pd.MultiIndex):
        refuse(op, "a level other than the (single) column level")
    unknown = set(kw) - {"dropna", "future_stack", "sort"}
    if unknown:
        refuse(op, f"the option(s) {sorted(unknown)}")
    res = df.stack(level, **kw)
    if not isinstance(res, pd.Series):
        refuse(op, "a result that is not one series")
    n, m = df.shape
    drops = not kw.get("future_stack", False) and kw.get("dropna", True) is not False
    flat = np.arange(n * m, dtype=np.int64)
    if drops:
        flat = flat[~np.asarray(df.isna().to_numpy(), bool).reshape(-1)]
    rows, cols = flat // max(m, 1), flat % max(m, 1)
    want = pd.MultiIndex.from_arrays([df.index[rows], df.columns[cols]])
    if len(res) != flat.size or not res.index.equals(want):
        refuse(op, "a result dslog cannot line up with the frame's cells")
    st = frame.lineage_state
    moved = st.rows_taken(rows)
    value = NO_LINEAGE
    for j in range(m):
        value = value.union(moved.restricted(moved.columns[j], cols == j))
    index = (*moved.index, NO_LINEAGE) if moved.index else ()
    return TrackedSeries(res, value, replace(moved, index=index))


def apply_rows(frame: TrackedDataFrame, func: Callable[..., Any], **kw: Any) -> TrackedSeries:
    """``frame.apply(func, axis=1)`` with one value per row: all-to-all within the row,
    flagged."""
    res = frame.plain.apply(func, axis=1, **kw)
    if not isinstance(res, pd.Series):
        refuse("DataFrame.apply", "a row-wise apply that returns several columns")
    st = frame.lineage_state
    lin = NO_LINEAGE
    for c in st.columns:
        lin = lin.union(c)
    st.ctx.flagged_ops.append("DataFrame.apply(axis=1)")
    return TrackedSeries(res, ColumnLineage(lin.contrib, lin.consid), st)


register("drop_duplicates", drop_duplicates)
register("apply_rows", apply_rows)
register("explode", explode)
register("melt", melt)
register("stack", stack)
