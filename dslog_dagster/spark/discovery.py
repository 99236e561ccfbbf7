"""Missing-parameter discovery for Spark steps (PROVision §VI-B), by pushing the selection down.

:mod:`dslog_dagster.core.discovery` selects the part of a NumPy input by the stored lineage of
the selected cells. That cannot work for a Spark step whose unknown parameter is a filter
threshold: the rows a filter rejects are in no output row's lineage, yet a lower threshold
would let them in and change the output. So a Spark step's part is chosen the way a selective
re-run chooses it (:mod:`~dslog_dagster.spark.pushdown`, PROVision §V-C): each input is
semijoined with the selected output rows on the output columns it carries through unchanged
(join keys, grouping keys). That keeps *every* input row with a selected row's keys, the rows
the stored run filtered out included, so a candidate's output rows with those keys are exactly
what a run on the whole input gives them, whatever the threshold.

Each candidate runs plainly (no capture: only values are compared) on that part. Its output
rows whose carried columns equal a selected row's are compared, as a multiset (Spark's row
order is not stable), with the stored output rows that have those columns; floats within a
relative 1e-9 (Spark sums a group in no fixed order), NaN equal to NaN, null to null. When no
output column reaches an input the part is the whole input and the whole outputs are compared.
A candidate that passes is confirmed on the whole input, so a reported match always
reproduces the selected rows; a candidate the step raises on is retried on the whole input
and, if it raises there too, reported as failing, not matching.

A caveat the answer cannot remove: a step that only filters carries every column, so the
selected rows alone decide, and every threshold that keeps them reproduces them. Select rows
next to the threshold (or a grouped output) to tell candidates apart.
"""

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from pyspark.sql import DataFrame

from dslog_dagster.core.discovery import Discovery, grid
from dslog_dagster.errors import DiscoveryError, QueryError
from dslog_dagster.spark.pushdown import TAG, pushdown_columns, semijoin, semijoin_keys
from dslog_dagster.spark.rowid import ROW_ID, rows_by_id
from dslog_dagster.spark.stored_subset import key_table, local_frame

__all__ = ["discover_frames"]

FrameRunner = Callable[[Mapping[str, Any], Mapping[str, DataFrame]], Any]
"""``run(params, inputs)``: the step's result for candidate ``params`` on ``inputs`` (input
array name -> DataFrame)."""

_RTOL = 1e-9


def _fmt(p: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in p.items())


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Rows ordered by their exact (non-float) values first, then by rounded floats, so two
    rows equal within the tolerance sort alike."""
    exact: list[Any] = []
    approx: list[Any] = []
    for v in row:
        if v is None:
            exact.append((0, ""))
        elif isinstance(v, float):
            approx.append((1, 0.0) if math.isnan(v) else (2, float(f"{v:.6g}")))
        elif isinstance(v, int | str | bool | bytes):
            exact.append((1, v))
        else:
            exact.append((1, repr(v)))
    return (*exact, *approx)


def _value_eq(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=_RTOL, abs_tol=0.0)
    return bool(a == b)


def same_rows(got: Sequence[tuple[Any, ...]], want: Sequence[tuple[Any, ...]]) -> bool:
    """Are ``got`` and ``want`` the same multiset of rows (floats within a relative 1e-9,
    NaN equal to NaN, null equal to null)?"""
    if len(got) != len(want):
        return False
    g = sorted(got, key=_sort_key)
    w = sorted(want, key=_sort_key)
    return all(
        len(a) == len(b) and all(_value_eq(x, y) for x, y in zip(a, b, strict=True))
        for a, b in zip(g, w, strict=True)
    )


class _Search:
    """Runs of one step on the part and on the whole input, and the stored rows they must give."""

    def __init__(
        self,
        run: FrameRunner,
        inputs: Mapping[str, DataFrame],
        stored: DataFrame,
        rows: np.ndarray,
        output: int,
    ) -> None:
        self.run, self.output = run, output
        self.names = list(inputs)
        self.plain = {n: f.drop(ROW_ID) if ROW_ID in f.columns else f for n, f in inputs.items()}
        visible = stored.drop(ROW_ID) if ROW_ID in stored.columns else stored
        self.columns = list(visible.columns)
        self.types = [(f.name, f.dataType.simpleString()) for f in visible.schema.fields]
        # the selected rows, fetched once and kept as a local frame: no candidate re-reads
        # the stored output to find them
        self.selected = rows_by_id(stored, rows).drop(ROW_ID)
        self._picked: list[Any] | None = None  # the selected rows, collected when first needed
        self._keys: dict[tuple[tuple[str, str], ...], DataFrame | None] = {}
        self.stored = visible
        self._want: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        self.part_runs = 0
        self.whole_runs = 0
        self.failed: list[tuple[dict[str, Any], str]] = []
        self.kept: dict[str, int] = {}

    def _out(self, params: Mapping[str, Any], frames: Mapping[str, DataFrame]) -> DataFrame:
        result = self.run(params, frames)
        outs = list(result) if isinstance(result, tuple | list) else [result]
        out = outs[self.output] if self.output < len(outs) else None
        if not isinstance(out, DataFrame):
            kind = type(out).__name__
            msg = f"the step returned a `{kind}` as output {self.output}, not a DataFrame"
            raise TypeError(msg)
        return out

    def _restricted(self, frame: DataFrame, keys: tuple[str, ...]) -> list[tuple[Any, ...]]:
        """``frame``'s rows whose ``keys`` equal a selected row's (all rows: no keys)."""
        if keys:
            frame = self._semijoin(frame, {k: k for k in keys})
        return [tuple(r) for r in frame.select(*[f"`{c}`" for c in self.columns]).collect()]

    def _semijoin(self, frame: DataFrame, on: Mapping[str, str]) -> DataFrame:
        """``frame`` ⋉ the selected rows on ``frame[on[c]] <=> selected[c]``: with one local
        frame of the distinct keys when they are simple (made once per ``on``; no candidate
        run deduplicates them again), else by Spark's null-safe semijoin."""
        at = tuple(on.items())
        if at not in self._keys:
            if self._picked is None:
                self._picked = self.selected.collect()
            table = key_table(self._picked, self.selected.schema, on)
            spark = self.selected.sparkSession
            self._keys[at] = None if table is None else local_frame(spark, table)
        keys = self._keys[at]
        return semijoin(frame, self.selected, on) if keys is None else semijoin_keys(frame, keys)

    def _want_rows(self, keys: tuple[str, ...]) -> list[tuple[Any, ...]]:
        if keys not in self._want:
            self._want[keys] = self._restricted(self.stored, keys)
        return self._want[keys]

    def _matches(self, out: DataFrame, keys: tuple[str, ...]) -> bool:
        mine = [(f.name, f.dataType.simpleString()) for f in out.schema.fields]
        if mine != self.types:
            return False
        return same_rows(self._restricted(out, keys), self._want_rows(keys))

    def pushdown(self, params: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        """Per input, ``{output column: input column}`` the selection reaches it on, for this
        candidate's plan (analysis only: no Spark job)."""
        tagged = {n: f.alias(TAG + n) for n, f in self.plain.items()}
        return pushdown_columns(self._out(params, tagged), self.names)

    def on_part(self, params: Mapping[str, Any], on: Mapping[str, Mapping[str, str]]) -> bool:
        """Does the candidate give the stored rows with the selected rows' keys, run on the
        inputs semijoined with the selection?"""
        part = {n: self._semijoin(f, on[n]) if on[n] else f for n, f in self.plain.items()}
        if not self.kept:
            self.kept = {n: int(f.count()) for n, f in part.items()}
        keys = tuple(dict.fromkeys(c for n in self.names for c in on[n]))
        self.part_runs += 1
        return self._matches(self._out(params, part), keys)

    def on_whole(self, params: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
        """Does the candidate give the stored rows with the selected rows' keys (every row:
        no keys) on the whole input? One it raises on does not (recorded in ``failed``)."""
        self.whole_runs += 1
        try:
            return self._matches(self._out(params, self.plain), keys)
        except Exception as e:  # the step's own code refuses the value
            self.failed.append((dict(params), f"{type(e).__name__}: {e}"))
            return False


def discover_frames(
    run: FrameRunner,
    inputs: Mapping[str, DataFrame],
    stored: DataFrame,
    rows: Sequence[int] | np.ndarray,
    space: Mapping[str, Sequence[Any]],
    *,
    output: int = 0,
    exhaustive: bool = False,
) -> Discovery:
    """Every candidate in ``space`` whose run reproduces the selected ``rows`` of the stored
    Spark output ``stored`` (see the module docstring).

    Args:
        run: runs the step (:data:`FrameRunner`).
        inputs: the step's input frames by array name, at the recorded versions (row ids, if
            they carry them, are dropped).
        stored: the stored output frame, with its row ids (``ROW_ID``).
        rows: the selected output row ids.
        space: candidate values per parameter.
        output: which of the step's outputs ``stored`` is.
        exhaustive: run every candidate on the whole input.

    Raises:
        DiscoveryError: no candidate reproduces the selected rows.
        QueryError: an empty space or selection.
    """
    t0 = time.perf_counter()
    candidates = grid(space)
    picked = np.unique(np.asarray(rows, dtype=np.int64))
    if len(picked) == 0:
        msg = "No output rows selected; select the rows the parameters must reproduce."
        raise QueryError(msg)
    if ROW_ID not in stored.columns:
        msg = "The stored output frame has no row ids; load it with value_loader(frames=True)."
        raise QueryError(msg)
    search = _Search(run, inputs, stored, picked, output)
    notes: list[str] = []
    if exhaustive:
        matches = [p for p in candidates if search.on_whole(p, ())]
        return _answer(search, matches, candidates, "exhaustive", len(picked), t0, notes)
    matches = []
    how = "part"
    for p in candidates:
        try:
            on = search.pushdown(p)
            keys = tuple(dict.fromkeys(c for n in search.names for c in on[n]))
            if not keys:
                how = "whole input"
                if search.on_whole(p, ()):
                    matches.append(p)
                continue
            passed = search.on_part(p, on)
        except Exception as e:  # the step raised on the part: let the whole input decide
            notes.append(
                f"With {_fmt(p)} the step failed on the selected part ({type(e).__name__}: "
                f"{e}); it ran on the whole input instead."
            )
            if search.on_whole(p, ()):
                matches.append(p)
            continue
        if passed and search.on_whole(p, keys):
            matches.append(p)
    if how == "whole input":
        notes.append(
            "No output column reaches an input unchanged (no join or grouping key carried "
            "through), so candidates ran on the whole input and whole outputs were compared."
        )
    return _answer(search, matches, candidates, how, len(picked), t0, notes)


def _answer(
    search: _Search,
    matches: list[dict[str, Any]],
    candidates: list[dict[str, Any]],
    how: str,
    selected: int,
    t0: float,
    notes: list[str],
) -> Discovery:
    runs = search.part_runs + search.whole_runs
    if search.failed:
        first = search.failed[0]
        notes = [
            *notes,
            f"{len(search.failed)} candidate(s) raised on the whole input and count as not "
            f"reproducing (first: {_fmt(first[0])}: {first[1]}).",
        ]
    if not matches:
        msg = (
            f"No candidate of the {len(candidates)} in the search space reproduces the "
            f"{selected:,} selected output row(s) ({runs} run(s) of the step, {how}). Widen the "
            "search space (other values, or another parameter), or check that the step's code "
            "and inputs are the ones that made this output." + "".join(" " + n for n in notes)
        )
        raise DiscoveryError(msg)
    return Discovery(
        tuple(matches), len(candidates), runs, search.part_runs, search.whole_runs, how,
        selected, dict(search.kept), time.perf_counter() - t0,
        (f"Selected {selected:,} output row(s) of a Spark frame; parts kept in input rows.",
         *notes),
    )  # fmt: skip
