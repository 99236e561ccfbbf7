"""Lineage rules of ``merge``, ``join`` and ``concat`` on tracked pandas frames.

Every rule runs the real pandas call. The rows pandas produced are found from hidden
row-position columns added to each side (``merge``/``join``) or from position series
concatenated the same way (``concat``), so duplicate keys, null keys (pandas matches them to
each other) and every ``how`` come out exactly as pandas made them. Then:

* a column of one side gets that side's lineage, moved to the output rows (none on rows
  where that side is missing);
* a key column pandas coalesced (``on=`` names it on both sides) is contributed by both
  matched key cells;
* every cell of a row considered the key cells of the rows it joined, and what those rows
  considered already (filters before the join).
"""

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dslog_dagster.pandas.frame import TrackedDataFrame, check_labels
from dslog_dagster.pandas.rules import register
from dslog_dagster.pandas.series import refuse
from dslog_dagster.pandas.state import NO_LINEAGE, ColumnLineage, FrameState

__all__ = ["concat", "join", "merge"]

_LPOS, _RPOS = "__dslog_left_row__", "__dslog_right_row__"


def _as_list(v: Any) -> list[Hashable]:
    if v is None:
        return []
    return list(v) if isinstance(v, list | tuple) else [v]


def _side_state(state: FrameState, positions: np.ndarray) -> FrameState:
    return state.rows_taken(positions)


def _key_pairs(frame: TrackedDataFrame, keys: Sequence[Hashable]) -> frozenset[tuple[int, int]]:
    out: frozenset[tuple[int, int]] = frozenset()
    for k in keys:
        out |= frame.lineage_state.columns[frame.columns.get_loc(k)].full()
    return out


def _joined(
    left: TrackedDataFrame,
    right: TrackedDataFrame,
    res: pd.DataFrame,
    tokens: list[Hashable],
    lkeys: list[Hashable],
    rkeys: list[Hashable],
    op: str,
    *,
    keep_index: bool = False,
) -> TrackedDataFrame:
    """The output of a join whose rows came from ``res[_LPOS]`` / ``res[_RPOS]`` and whose
    columns are ``tokens`` (``("L", j)``, ``("R", j)`` or a coalesced key's name)."""
    lpos = np.asarray(res[_LPOS].fillna(-1).to_numpy(), np.int64)
    rpos = np.asarray(res[_RPOS].fillna(-1).to_numpy(), np.int64)
    value = res.drop(columns=[_LPOS, _RPOS])
    check_labels(value, op)
    if len(tokens) != value.shape[1]:
        refuse(op, "its columns could not be traced to the two sides")
    # both sides' row considered lineage and their key cells, on the rows each side has
    lst = left.lineage_state.considering(_key_pairs(left, lkeys))
    rst = right.lineage_state.considering(_key_pairs(right, rkeys))
    if keep_index:  # a join on the index: index levels holding cells (group keys) are keys
        lst = lst.considering(_index_pairs(lst) if not lkeys else frozenset())
        rst = rst.considering(_index_pairs(rst))
    ls, rs = _side_state(lst, lpos), _side_state(rst, rpos)
    cols: list[ColumnLineage] = []
    for t in tokens:
        if isinstance(t, tuple) and t[0] == "L":
            cols.append(ls.columns[t[1]])
        elif isinstance(t, tuple) and t[0] == "R":
            cols.append(rs.columns[t[1]])
        else:  # a key pandas coalesced: from both matched key cells
            lk = ls.columns[left.columns.get_loc(t)]
            rk = rs.columns[right.columns.get_loc(t)]
            cols.append(lk.union(rk))
    state = FrameState(
        ls.ctx,
        len(value),
        tuple(cols),
        ls.row_consid | rs.row_consid,
        sources=ls.sources | rs.sources,
        index=ls.index if keep_index else (),
    )
    return TrackedDataFrame(value, state)


def _index_pairs(state: FrameState) -> frozenset[tuple[int, int]]:
    out: frozenset[tuple[int, int]] = frozenset()
    for lin in state.index:
        out |= lin.full()
    return out


def _tokens(
    left: pd.DataFrame, right: pd.DataFrame, run: Any, keys: set[Hashable], op: str
) -> list[Hashable]:
    """Which side (and column position) each output column of ``run(left, right)`` comes
    from: the same call on empty frames whose non-key columns are renamed to tokens."""
    lt = left.iloc[:0].set_axis(
        [c if c in keys else f"__dslog_L{j}" for j, c in enumerate(left.columns)], axis=1
    )
    rt = right.iloc[:0].set_axis(
        [c if c in keys else f"__dslog_R{j}" for j, c in enumerate(right.columns)], axis=1
    )
    cols = list(run(lt, rt).columns)
    out: list[Hashable] = []
    for c in cols:
        if isinstance(c, str) and c.startswith("__dslog_L"):
            out.append(("L", int(c[9:])))
        elif isinstance(c, str) and c.startswith("__dslog_R"):
            out.append(("R", int(c[9:])))
        elif c in keys and c in left.columns and c in right.columns:
            out.append(c)
        elif c in keys and c in left.columns:
            out.append(("L", left.columns.get_loc(c)))
        elif c in keys and c in right.columns:
            out.append(("R", right.columns.get_loc(c)))
        else:
            refuse(op, f"an output column `{c}` dslog cannot trace to one side")
    return out


def merge(left: TrackedDataFrame, right: Any, **kw: Any) -> TrackedDataFrame:
    """``left.merge(right, how=..., on=... | left_on=/right_on=, suffixes=...)``."""
    op = "DataFrame.merge"
    if not isinstance(right, TrackedDataFrame):
        refuse(op, "the other frame is not tracked (pass it as a capture input)")
    if kw.get("left_index") or kw.get("right_index") or kw.get("indicator"):
        refuse(op, "index joins or indicator= (use on= / left_on= / right_on=)")
    on = _as_list(kw.get("on"))
    lkeys = on or _as_list(kw.get("left_on"))
    rkeys = on or _as_list(kw.get("right_on"))
    if kw.get("how") != "cross" and not lkeys:
        common = [c for c in left.columns if c in right.columns]
        lkeys = rkeys = common
    lp = left.plain.assign(**{_LPOS: np.arange(len(left), dtype=np.int64)})
    rp = right.plain.assign(**{_RPOS: np.arange(len(right), dtype=np.int64)})
    if not kw.get("on") and not kw.get("left_on") and kw.get("how") != "cross":
        kw = {**kw, "on": lkeys}
    res = pd.merge(lp, rp, **kw)
    tokens = _tokens(
        left.plain, right.plain, lambda a, b: pd.merge(a, b, **kw), set(lkeys) | set(rkeys), op
    )
    return _joined(left, right, res, tokens, lkeys, rkeys, op)


def join(left: TrackedDataFrame, other: Any, **kw: Any) -> TrackedDataFrame:
    """``left.join(other, on=None | column, how=..., lsuffix=, rsuffix=)``: on the index
    (not a cell: only ``on=``'s left key cells are considered)."""
    op = "DataFrame.join"
    if not isinstance(other, TrackedDataFrame):
        refuse(op, "the other frame is not tracked (pass it as a capture input)")
    lkeys = _as_list(kw.get("on"))
    lp = left.plain.assign(**{_LPOS: np.arange(len(left), dtype=np.int64)})
    rp = other.plain.assign(**{_RPOS: np.arange(len(other), dtype=np.int64)})
    res = lp.join(rp, **kw)
    tokens = _tokens(left.plain, other.plain, lambda a, b: a.join(b, **kw), set(lkeys), op)
    return _joined(left, other, res, tokens, lkeys, [], op, keep_index=True)


def concat(
    frames: Sequence[Any],
    *,
    axis: Any = 0,
    join: str = "outer",
    ignore_index: bool = False,
    **kw: Any,
) -> TrackedDataFrame:
    """``pd.concat`` of tracked frames: ``axis=0`` stacks rows (a column takes each part's
    column of the same label), ``axis=1`` puts columns side by side, rows aligned on the index
    as pandas aligns them (positions found by concatenating position series the same way)."""
    op = "pandas.concat"
    if kw:
        refuse(op, f"options {sorted(kw)}")
    parts = list(frames)
    if not parts or not all(isinstance(f, TrackedDataFrame) for f in parts):
        refuse(op, "every part must be a tracked frame")
    by_rows = axis in (0, "index")
    if (not by_rows or not ignore_index) and any(f.lineage_state.index for f in parts):
        refuse(op, "parts whose index holds group keys (reset_index() them first)")
    plain = [f.plain for f in parts]
    value = pd.concat(plain, axis=axis, join=join, ignore_index=ignore_index)
    check_labels(value, op)
    ctx = parts[0].lineage_state.ctx
    if axis in (0, "index"):
        n = len(value)
        offsets = np.cumsum([0] + [len(f) for f in parts])
        moved_parts = []
        for f, off in zip(parts, offsets, strict=False):
            positions = np.full(n, -1, np.int64)
            positions[off : off + len(f)] = np.arange(len(f))
            moved_parts.append(f.lineage_state.rows_taken(positions))
        cols: list[ColumnLineage] = []
        for c in value.columns:
            lin = NO_LINEAGE
            for f, moved in zip(parts, moved_parts, strict=True):
                if c in f.columns:
                    lin = lin.union(moved.columns[f.columns.get_loc(c)])
            cols.append(lin)
        row: frozenset[tuple[int, int]] = frozenset()
        for moved in moved_parts:
            row |= moved.row_consid
        state = FrameState(ctx, n, tuple(cols), row, sources=_sources(parts))
        return TrackedDataFrame(value, state)
    pos = pd.concat(
        [pd.Series(np.arange(len(f), dtype=np.int64), index=f.index) for f in parts],
        axis=1,
        join=join,
    )
    cols, row = [], frozenset()
    for i, f in enumerate(parts):
        positions = np.asarray(pos.iloc[:, i].fillna(-1).to_numpy(), np.int64)
        moved = f.lineage_state.rows_taken(positions)
        cols.extend(moved.columns)
        row |= moved.row_consid
    state = FrameState(ctx, len(value), tuple(cols), row, sources=_sources(parts))
    return TrackedDataFrame(value, state)


def _sources(parts: Sequence[TrackedDataFrame]) -> frozenset[int]:
    out: frozenset[int] = frozenset()
    for f in parts:
        out |= f.lineage_state.sources
    return out


register("merge", merge)
register("join", join)
