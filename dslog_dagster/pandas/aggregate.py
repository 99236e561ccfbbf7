"""Lineage rules of ``groupby(...).agg`` (named aggregations too) on tracked pandas frames.

The real ``groupby`` runs; ``ngroup()`` with the same options numbers each row's group in the
order pandas emits groups (``-1`` or null: a row whose key is null and ``dropna=True``). Then
output row ``g`` pools its member rows (:meth:`~dslog_dagster.pandas.rows.RowMap.gather`):

* *considered*, for every cell of the group: the group's key cells, what its members
  considered already (filters before), and every member cell of the aggregated column;
* *contributing* follows the function: ``sum``/``mean``/``median``/``std``/``var``/``prod``/
  ``nunique``/``any``/``all`` — the non-null member cells; ``min``/``max`` — the member cells
  equal to the result (every tied cell); ``first``/``last`` — the first/last non-null member
  cell; ``count``/``size`` — none (a count is decided by its cells, not made of them);
* the keys (as columns with ``as_index=False``, or as the index until ``reset_index``) are
  contributed by every member's key cell.

Functions given as callables have no rule and are refused.
"""

import copy
from collections.abc import Hashable
from typing import Any

import numpy as np
import pandas as pd

from dslog_dagster.pandas.frame import TrackedDataFrame, check_labels
from dslog_dagster.pandas.rows import ranges
from dslog_dagster.pandas.rules import register
from dslog_dagster.pandas.series import TrackedSeries, refuse
from dslog_dagster.pandas.state import ColumnLineage, FrameState, Pairs

__all__ = ["ENDS", "FUNCS", "PICK", "TrackedGroupBy", "end_members"]

_NON_NULL = {"sum", "mean", "median", "std", "var", "prod", "nunique", "any", "all", "sem"}
PICK = {"min", "max"}
ENDS = {"first", "last"}
_COUNT = {"count"}
FUNCS = _NON_NULL | PICK | ENDS | _COUNT


def end_members(candidates: np.ndarray, codes: np.ndarray, *, last: bool) -> np.ndarray:
    """Per group code, the first (``last``: the last) row among ``candidates``, as a row
    mask: the cell ``first``/``last`` picks."""
    idx = np.flatnonzero(candidates)
    group = codes[idx]
    if last:
        idx, group = idx[::-1], group[::-1]
    _, first = np.unique(group, return_index=True)
    mask = np.zeros(candidates.size, bool)
    mask[idx[first]] = True
    return mask


class TrackedGroupBy:
    """``frame.groupby(by, sort=, dropna=, as_index=)`` of a tracked frame."""

    def __init__(
        self,
        frame: TrackedDataFrame,
        by: Any,
        *,
        as_index: bool = True,
        sort: bool = True,
        dropna: bool = True,
        selection: Any = None,
        **kw: Any,
    ) -> None:
        if kw:
            refuse("DataFrame.groupby", f"options {sorted(kw)}")
        keys = list(by) if isinstance(by, list | tuple) else [by]
        for k in keys:
            if isinstance(k, TrackedSeries | pd.Series) or callable(k) or k not in frame.columns:
                refuse("DataFrame.groupby", "grouping by something other than columns")
        self._f, self._keys, self._by = frame, keys, by
        self._opts = {"sort": sort, "dropna": dropna}
        self._as_index = as_index
        self._selection = selection
        df = frame.plain
        # one groupby for the codes and the aggregations: its grouper (the key factorization)
        # is computed once and shared
        self._gb = df.groupby(by, as_index=as_index, **self._opts)
        codes = self._gb.ngroup()
        c = np.asarray(codes.fillna(-1).to_numpy(), np.int64)
        self._valid = c >= 0
        self._codes = c
        self._n = int(c.max()) + 1 if c.size and self._valid.any() else 0
        st = frame.lineage_state
        self._rows = np.flatnonzero(self._valid).astype(np.int64)
        self._all = st.ctx.remap(lambda m: m.gather(c[self._valid], self._rows, self._n))

    def __getitem__(self, key: Any) -> "TrackedGroupBy":
        g = copy.copy(self)
        g.__dict__.update(_selection=key)
        return g

    def _grouped(self) -> Any:
        return self._gb if self._selection is None else self._gb[self._selection]

    def _gathered(self, pairs: Pairs, mask: np.ndarray | None = None) -> Pairs:
        keep = None if mask is None else self._valid & mask
        if keep is None or np.array_equal(keep, self._valid):
            move = self._all  # no null to leave out: every member row, as the keys' lineage
        else:
            rows = np.flatnonzero(keep).astype(np.int64)
            out = self._codes[keep]
            move = self._f.lineage_state.ctx.remap(lambda m: m.gather(out, rows, self._n))
        return frozenset((move(s), c) for s, c in pairs)

    def _value_lineage(self, col: Hashable, func: str) -> ColumnLineage:
        f = self._f
        lin = f.lineage_state.columns[f.columns.get_loc(col)]
        vals = f.plain[col]
        considered = self._gathered(lin.full())
        notnull = np.asarray(vals.notna().to_numpy(), bool)
        if func in _NON_NULL:
            mask = notnull
        elif func in PICK:
            per_row = self._gb[col].transform(func)
            mask = notnull & np.asarray((vals == per_row).to_numpy(), bool)
        elif func in ENDS:
            mask = end_members(notnull & self._valid, self._codes, last=func == "last")
        else:  # count
            return ColumnLineage(frozenset(), considered)
        return ColumnLineage(self._gathered(lin.contrib, mask), considered)

    def _state(self, columns: list[ColumnLineage]) -> FrameState:
        st = self._f.lineage_state
        key_lins = [st.columns[self._f.columns.get_loc(k)] for k in self._keys]
        key_pairs: Pairs = frozenset()
        for kl in key_lins:
            key_pairs |= kl.full()
        keys = [  # a key's characters: the same characters of every member of its group
            ColumnLineage(
                self._gathered(kl.contrib),
                self._gathered(kl.consid),
                None if kl.chars is None else self._all(kl.chars),
            )
            for kl in key_lins
        ]
        row = self._gathered(st.row_consid | key_pairs)
        if not self._as_index:
            return FrameState(st.ctx, self._n, (*keys, *columns), row, sources=st.sources)
        return FrameState(
            st.ctx, self._n, tuple(columns), row, sources=st.sources, index=tuple(keys)
        )

    def _specs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[Hashable, str]]:
        """``(source column, function)`` per output column, in pandas' output order."""
        op = "DataFrameGroupBy.agg"
        sel = self._selection
        if kwargs:
            if args:
                refuse(op, "positional and named aggregations together")
            specs = []
            for v in kwargs.values():
                col, func = (v.column, v.aggfunc) if isinstance(v, pd.NamedAgg) else v
                specs.append((col, func))
        elif len(args) == 1 and isinstance(args[0], dict):
            specs = list(args[0].items())
        elif len(args) == 1 and isinstance(args[0], str):
            if sel is None:
                cols = [c for c in self._f.columns if c not in self._keys]
            else:
                cols = list(sel) if isinstance(sel, list) else [sel]
            specs = [(c, args[0]) for c in cols]
        else:
            refuse(op, "aggregations other than a function name, a dict or named ones")
        for col, func in specs:
            if not isinstance(func, str) or func not in FUNCS:
                refuse(op, f"the function {func!r} (supported: {sorted(FUNCS)})")
            if col not in self._f.columns or col in self._keys:
                refuse(op, f"aggregating `{col}`")
        return specs

    def agg(self, *args: Any, **kwargs: Any) -> Any:
        """See the module docstring."""
        specs = self._specs(args, kwargs)
        res = self._grouped().agg(*args, **kwargs)
        columns = [self._value_lineage(c, fn) for c, fn in specs]
        return self._result(res, columns, "DataFrameGroupBy.agg")

    aggregate = agg

    def _result(self, res: Any, columns: list[ColumnLineage], op: str) -> Any:
        state = self._state(columns)
        if isinstance(res, pd.Series):
            if len(state.columns) != 1 or len(res) != self._n:
                refuse(op, "a result dslog cannot line up with its groups")
            return TrackedSeries(res, state.columns[0], state)
        check_labels(res, op)
        if res.shape != (self._n, len(state.columns)):
            refuse(op, "a result dslog cannot line up with its groups")
        return TrackedDataFrame(res, state)

    def transform(self, func: Any) -> Any:
        """Each row gets its group's aggregate (same rows as the frame, so the result can be
        assigned back): the function's rule over the row's group, with the group's key cells
        and what its members considered as considered lineage. Pairs grow as the sum of the
        squared group sizes."""
        op = "DataFrameGroupBy.transform"
        if not isinstance(func, str) or func not in FUNCS:
            refuse(op, f"the function {func!r} (supported: {sorted(FUNCS)})")
        sel = self._selection
        if sel is None:
            cols = [c for c in self._f.columns if c not in self._keys]
        else:
            cols = list(sel) if isinstance(sel, list) else [sel]
        res = self._grouped().transform(func)
        st = self._f.lineage_state
        n = st.n_rows
        g = self._codes
        valid = np.flatnonzero(self._valid).astype(np.int64)
        order = valid[np.argsort(g[valid], kind="stable")]
        counts_all = np.bincount(g[valid], minlength=self._n).astype(np.int64)
        starts_all = (np.cumsum(counts_all) - counts_all).astype(np.int64)
        counts = counts_all[g[valid]]
        out = np.repeat(valid, counts)
        peers = order[ranges(starts_all[g[valid]], counts)]
        rows_g = self._f.lineage_state.ctx.remap(lambda m: m.gather(out, peers, n))
        lins = []
        for c in cols:
            agg = self._value_lineage(c, func)  # in the groups' rows: bring it to each member
            back = self._to_members(agg)
            lins.append(back)
        key_pairs: Pairs = frozenset()
        for k in self._keys:
            key_pairs |= st.columns[self._f.columns.get_loc(k)].full()
        decided = frozenset((rows_g(s), c) for s, c in key_pairs | st.row_consid)
        lins = [ColumnLineage(lin.contrib, lin.consid | decided) for lin in lins]
        if isinstance(res, pd.Series):
            if len(lins) != 1:
                refuse(op, "a result dslog cannot line up with its columns")
            return TrackedSeries(res, lins[0], st)
        check_labels(res, op)
        if res.shape[1] != len(lins):
            refuse(op, "a result dslog cannot line up with its columns")
        return TrackedDataFrame(res, st.with_columns(lins))

    def _to_members(self, lin: ColumnLineage) -> ColumnLineage:
        """Lineage over the groups' rows, taken to every member row of each group."""
        positions = np.where(self._valid, self._codes, -1)
        move = self._f.lineage_state.ctx.remap(lambda m: m.take(positions))
        return lin.mapped(move)

    def size(self) -> Any:
        """Rows per group: only considered lineage (the keys and what the rows considered)."""
        res = self._grouped().size()
        return self._result(res, [ColumnLineage()], "DataFrameGroupBy.size")

    def _one(self, func: str) -> Any:
        return self.agg(func)

    def sum(self) -> Any:
        return self._one("sum")

    def mean(self) -> Any:
        return self._one("mean")

    def median(self) -> Any:
        return self._one("median")

    def min(self) -> Any:
        return self._one("min")

    def max(self) -> Any:
        return self._one("max")

    def count(self) -> Any:
        return self._one("count")

    def first(self) -> Any:
        return self._one("first")

    def last(self) -> Any:
        return self._one("last")

    def std(self) -> Any:
        return self._one("std")

    def var(self) -> Any:
        return self._one("var")

    def nunique(self) -> Any:
        return self._one("nunique")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        refuse(f"DataFrameGroupBy.{name}")


register("groupby", TrackedGroupBy)
