"""Selective on-demand reconstruction of a pandas step: the lineage of a few output rows from a
re-run on the input rows that share their key (PROVision §V-C, for eager pandas code).

Spark has a plan to push a selection down (:mod:`dslog_dagster.spark.pushdown`); pandas runs
eagerly and has none. What stands in for it is the list of pandas calls the step's code makes
on its tracked frames, recorded while the capture runs (a profile hook that notes each call of
the capture's facade — ``TrackedDataFrame.merge``, ``TrackedGroupBy.agg``, ``pd.merge``, a
Series comparison ... — made from outside dslog, with its arguments). Those calls can only
read data through the facade, and every call that would let Python see a value (``len``,
iteration, ``to_numpy``, a reduction) is outside the list below, so the list does not depend on
the rows: a run on a few rows records what a run on all of them does.

A step is **row-selective on key column** ``c`` when every call it makes keeps output rows of
one ``c`` value apart from input rows of another:

* row-local calls: column access and selection, filters by a mask of the same rows,
  ``assign`` / ``df[x] = ...``, ``rename``, ``drop``, ``dropna`` of rows, element-wise Series
  arithmetic, comparisons and methods (the capture already refuses to combine series of
  different rows, and reductions); not ``query``, whose expression pandas evaluates itself
  (``x > x.mean()`` would read every row unseen);
* ``groupby(by)`` with ``c`` among ``by``, then its aggregates or ``transform``;
* ``merge`` with ``c`` among the join keys (``on=``, the common columns, or the same position
  of ``left_on=`` / ``right_on=``);

and none of them writes ``c`` (assigns, renames, fills or casts it), so the output's ``c`` is
an input's ``c`` unchanged. Then the output rows whose ``c`` is in a set ``K`` are exactly what
the step computes from the input rows whose ``c`` is in ``K``, each with the same lineage —
though not always in the same order (pandas' merge orders many-to-many matches by how it
hashes the keys it reads). So order-dependent aggregates (``first``, ``last``) are not
selective either, and a selected row equal in every column to another row of its key (told
apart by order only) makes the re-run answer nothing. Anything else (a sort, ``head``,
``drop_duplicates``, a cumulative or shifted column, ``apply``, ``concat``, ``len(df)``, a call
not listed) makes the step not selective, and :func:`rerun_rows` says which call, for the
caller to re-run the whole step.

:func:`rerun_rows` picks ``c`` (an output column every ``groupby`` and ``merge`` keys on),
semijoins each input that has ``c`` with the selected rows' values, re-runs the step under
capture on those rows, checks that the rows of the stored output with ``c`` in ``K`` come out
in the stored order with equal values (else it answers nothing: the caller re-runs the whole
step, which refuses a stored version that does not reproduce), and renames the lineage's rows
to the stored input and output row positions.
"""

import os
import sys
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import numpy as np
import pandas as pd

import dslog_dagster
import dslog_dagster.core
from dslog_dagster.core.capture import Capture
from dslog_dagster.core.compression import compress
from dslog_dagster.core.on_demand import Rerun, Selection, register_selective
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.pandas.aggregate import ENDS
from dslog_dagster.pandas.frame import TrackedDataFrame
from dslog_dagster.pandas.series import TrackedSeries

__all__ = ["Call", "key_column", "record_calls", "rerun_rows"]

PROBE_ROWS = 64
"""Rows of each input the first (key-finding) run reads."""


@dataclass(frozen=True, slots=True)
class Call:
    """One call of the pandas facade made by the step's code: what ran and its arguments."""

    name: str
    args: dict[str, Any]


_INTERNAL = tuple(
    os.path.dirname(m.__file__ or "") + os.sep for m in (dslog_dagster, dslog_dagster.core)
)
_FACADE = os.path.dirname(__file__) + os.sep
_KINDS_WRAPPER = "_wrap.<locals>.recorded"
"""The wrapper :mod:`~dslog_dagster.pandas.kinds` puts around each facade method."""


def record_calls(fn: Callable[[], Any]) -> tuple[Any, list[Call]]:
    """Run ``fn()`` and list the calls of the tracked pandas facade made from outside dslog.

    Needs the process's profile hook: the caller checks no profiler holds it."""
    calls: list[Call] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(_FACADE):
            return
        if frame.f_code.co_qualname == _KINDS_WRAPPER:
            return
        back = frame.f_back
        if back is not None and back.f_code.co_qualname == _KINDS_WRAPPER:
            if getattr(back.f_locals.get("fn"), "__code__", None) is not frame.f_code:
                return  # the wrapper's own helpers
            back = back.f_back  # the method's caller is the one who called its wrapper
        if back is not None and back.f_code.co_filename.startswith(_INTERNAL):
            return
        calls.append(Call(frame.f_code.co_qualname, dict(frame.f_locals)))

    sys.setprofile(hook)
    threading.setprofile(hook)  # threads the step starts report their calls too
    try:
        return fn(), calls
    finally:
        threading.setprofile(None)
        sys.setprofile(None)


_ROW_LOCAL_SERIES = {
    *(
        f"__{op}__"
        for op in [
            "add",
            "radd",
            "sub",
            "rsub",
            "mul",
            "rmul",
            "truediv",
            "rtruediv",
            "floordiv",
            "mod",
            "pow",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "and",
            "or",
            "xor",
            "invert",
            "neg",
            "abs",
        ]
    ),
    "name",
    "dtype",
    "abs",
    "round",
    "astype",
    "isna",
    "notna",
    "isin",
    "between",
    "map",
    "fillna",
    "where",
    "mask",
    "clip",
    "replace",
    "str",
}
_ROW_LOCAL_FRAME = {"__getattr__", "columns", "dtypes", "__contains__", "select_dtypes", "copy"}
_GROUPBY = {
    "__getitem__",
    "__getattr__",
    "transform",
    "size",
    *["sum", "mean", "median", "min", "max", "count", "std", "var", "nunique"],
}


def _labels(v: Any) -> list[Any]:
    if v is None:
        return []
    return list(v) if isinstance(v, list | tuple) else [v]


def _strings(v: Any) -> set[str]:
    """Every string in ``v`` (nested tuples, lists, dict values, named aggregations)."""
    if isinstance(v, str):
        return {v}
    if isinstance(v, pd.NamedAgg):
        return _strings(v.aggfunc)
    if isinstance(v, dict):
        return _strings(list(v.values()))
    if isinstance(v, list | tuple):
        return set().union(*(_strings(x) for x in v)) if v else set()
    return set()


def _merge_keys(left: Any, right: Any, kw: dict[str, Any]) -> list[tuple[Any, Any]] | None:
    """The ``(left key, right key)`` pairs of a merge; ``None`` for an index or cross join."""
    if kw.get("how") == "cross" or kw.get("left_index") or kw.get("right_index"):
        return None
    on = _labels(kw.get("on"))
    if on:
        return [(k, k) for k in on]
    lk, rk = _labels(kw.get("left_on")), _labels(kw.get("right_on"))
    if lk or rk:
        return list(zip(lk, rk, strict=False))
    common = [c for c in getattr(left, "columns", []) if c in getattr(right, "columns", [])]
    return [(c, c) for c in common]


def _check(call: Call, key: Hashable) -> str | None:
    """Why ``call`` is not selective on ``key`` (``None``: it is)."""
    cls, _, method = call.name.rpartition(".")
    a = call.args
    if cls == "TrackedSeries":
        if method in ("to_frame", "rename", "reset_index"):
            return "it names a series `{key}`" if key in _labels(a.get("name")) else None
        return None if method in _ROW_LOCAL_SERIES else f"Series.{method}"
    if cls == "TrackedStringMethods":
        return None  # element-wise string methods
    if cls == "TrackedGroupBy":
        if method == "agg" and key in a.get("kwargs", {}):
            return f"groupby(...).agg names an aggregate `{key}`"
        if method in ENDS or ENDS & _strings([a.get("args"), a.get("kwargs"), a.get("func")]):
            # a group's first row depends on the row order, which a merge does not keep when
            # it reads fewer rows
            return "groupby(...) first / last (they depend on the row order)"
        return None if method in _GROUPBY | {"agg"} else f"groupby(...).{method}"
    if cls == "TrackedDataFrame":
        if method in _ROW_LOCAL_FRAME:
            return None
        if method == "__getitem__":
            k = a.get("key")
            if isinstance(k, TrackedSeries):
                return None  # a mask of the same rows (the capture checks)
            labels = list(k) if isinstance(k, list | tuple) else [k]
            if all(isinstance(v, str | int) and not isinstance(v, bool) for v in labels):
                return None  # columns by label
            return "DataFrame[...] by position, slice or an untracked mask"
        if method == "__setitem__":
            return f"it assigns column `{key}`" if key in _labels(a.get("key")) else None
        if method == "assign":
            return f"it assigns column `{key}`" if key in a.get("kwargs", {}) else None
        if method == "drop":
            return None  # rows by label are refused by the capture itself
        if method == "rename":
            m = a.get("columns") if a.get("columns") is not None else a.get("mapper")
            if not isinstance(m, dict):
                return "DataFrame.rename by a function"
            return f"it renames `{key}`" if key in m or key in m.values() else None
        if method in ("astype", "fillna"):
            v = a.get("dtype" if method == "astype" else "value")
            if isinstance(v, dict) and key not in v:
                return None
            return f"DataFrame.{method} of every column (or of `{key}`)"
        if method == "dropna":
            kw = a.get("kw", {})
            return "dropna of columns" if kw.get("axis") in (1, "columns") else None
        if method == "reset_index":
            return None
        if method == "groupby":
            by = _labels(a.get("by"))
            return None if key in by else f"groupby by {by}, not `{key}`"
        if method == "merge":
            return _check_merge(a.get("self"), a.get("right"), a.get("kw", {}), key)
        return f"DataFrame.{method}"
    if call.name.endswith("dispatch"):  # pd.merge / pd.concat / pd.get_dummies
        original = a.get("original")
        name = getattr(original, "__name__", "?")
        args, kw = list(a.get("args", ())), dict(a.get("kwargs", {}))
        operands = [*args, *kw.values()]
        operands += [v for o in operands if isinstance(o, list | tuple) for v in o]
        if not any(isinstance(o, TrackedDataFrame | TrackedSeries) for o in operands):
            return None  # pandas' own function on plain frames (pandas calling itself)
        if name != "merge":
            return f"pd.{name}"
        left = args[0] if args else kw.pop("left", None)
        right = args[1] if len(args) > 1 else kw.pop("right", None)
        return _check_merge(left, right, kw, key)
    return call.name


def _check_merge(left: Any, right: Any, kw: dict[str, Any], key: Hashable) -> str | None:
    pairs = _merge_keys(left, right, kw)
    if pairs is None:
        return "an index or cross merge"
    return None if (key, key) in pairs else f"a merge on {pairs}, not on `{key}`"


def key_column(
    calls: Sequence[Call], candidates: Sequence[Hashable]
) -> tuple[Hashable | None, str]:
    """The first of ``candidates`` the step is selective on, and ``""``; or ``None`` and why
    none is (the first reason of the first candidate)."""
    first = ""
    for c in candidates:
        why = next((w for w in (_check(call, c) for call in calls) if w is not None), None)
        if why is None:
            return c, ""
        first = first or f"not row-selective on `{c}`: {why}"
    return None, first or "no output column is an input column"


def _outputs(value: Any) -> list[Any]:
    return list(value) if isinstance(value, tuple) else [value]


def _equal_rows(got: pd.DataFrame, stored: pd.DataFrame) -> bool:
    """Equal values row by row, NaN equal to NaN. The dtypes may differ: a column's dtype is
    decided by all its rows (an outer merge makes an int column float when some row has no
    match), so fewer rows may give ``int64`` where the stored frame has ``float64``."""
    try:
        pd.testing.assert_frame_equal(
            got.reset_index(drop=True),
            stored.reset_index(drop=True),
            check_dtype=False,
            check_exact=True,
            check_categorical=False,
        )
    except AssertionError:
        return False
    return True


def _remap(table: LineageTable, out_to: np.ndarray, in_to: np.ndarray, shape: Any) -> LineageTable:
    """``table`` with output rows renamed by ``out_to`` (``-1``: left out) and input rows by
    ``in_to``, over an output of shape ``shape``."""
    rel = table.decompress()
    new = out_to[rel.out_cols[0]]
    keep = new >= 0
    out = [new[keep], *[c[keep] for c in rel.out_cols[1:]]]
    ins = [in_to[rel.in_cols[0][keep]], *[c[keep] for c in rel.in_cols[1:]]]
    in_shape = (int(shape[1][0]), *rel.in_shape[1:])
    return compress(LineageRelation.from_columns(tuple(shape[0]), in_shape, out, ins))


def rerun_rows(rerun: Rerun, output: int, picked: np.ndarray) -> Selection:
    """The lineage of stored rows ``picked`` of output ``output`` from a re-run on the input
    rows sharing their key (see the module docstring); tables ``None`` with the reason when
    the step is not selective or the reduced run does not give the stored rows."""
    t0 = time.perf_counter()
    frames = list(rerun.inputs)
    if not all(isinstance(f, pd.DataFrame) for f in frames):
        return Selection(None, "an input is not a pandas DataFrame")
    if sys.getprofile() is not None or threading.getprofile() is not None:
        return Selection(None, "a profiler holds the profile hook the list of calls needs")
    stored = rerun.load_output(output)
    capture = Capture(mode=rerun.mode)
    try:
        small = [f.iloc[:PROBE_ROWS] for f in frames]
        _, calls = record_calls(lambda: capture.run(rerun.call, *small))
    except Exception as e:  # the step fails on a few rows: no list of its calls
        return Selection(None, f"a run on its first {PROBE_ROWS} rows failed ({e})")
    in_cols = {c for f in frames for c in f.columns}
    key, why = key_column(calls, [c for c in stored.columns if c in in_cols])
    if key is None:
        return Selection(None, why)
    values = stored[key].iloc[picked]
    reduced, kept = [], []
    for f in frames:
        if key in f.columns:
            mask = f[key].isin(values).to_numpy()
            reduced.append(f[mask])
            kept.append(np.flatnonzero(mask).astype(np.int64))
        else:
            reduced.append(f)
            kept.append(np.arange(len(f), dtype=np.int64))
    try:
        result, calls = record_calls(lambda: capture.run(rerun.call, *reduced))
    except Exception as e:
        return Selection(None, f"the run on the selected key's rows failed ({e})")
    if key_column(calls, [key])[0] is None:  # the same calls as on the first rows, or refuse
        return Selection(None, f"the run on the selected rows made calls not selective on {key}")
    outs = _outputs(result.value)
    if output >= len(outs) or not isinstance(outs[output], pd.DataFrame):
        return Selection(None, "the reduced run returned other outputs")
    got = outs[output]
    s_rows = np.flatnonzero(stored[key].isin(values).to_numpy())
    g_rows = np.flatnonzero(got[key].isin(values).to_numpy()) if key in got.columns else None
    if (
        g_rows is None
        or len(g_rows) != len(s_rows)
        or list(got.columns) != list(stored.columns)
        or not _equal_rows(got.iloc[g_rows], stored.iloc[s_rows])
    ):
        return Selection(
            None,
            f"the run on the rows of the selected `{key}` values does not give the stored rows",
        )
    is_picked = np.isin(s_rows, picked)
    twins = stored.iloc[s_rows].duplicated(keep=False).to_numpy()
    if twins[is_picked].any():
        # equal rows are told apart by their order, which a merge does not keep when it reads
        # fewer rows: which one's lineage is which would be a guess
        return Selection(
            None, f"a selected row is equal in every column to another row of its `{key}` value"
        )
    out_to = np.full(len(got), -1, dtype=np.int64)
    out_to[g_rows[is_picked]] = s_rows[is_picked]
    tables = result.considered_tables if rerun.mode == "considered" else result.tables
    out_shape = tuple(rerun.op.outputs[output].shape)
    done: dict[tuple[int, int], LineageTable] = {}
    for (o, i), t in (tables or {}).items():
        if o != output:
            continue
        rec = rerun.records[i]
        done[(o, i)] = _remap(t, out_to, kept[i], (out_shape, tuple(rec.shape)))
    n_in = sum(len(r) for r in reduced)
    n_all = sum(len(f) for f in frames)
    how = (
        f"key `{key}`: re-ran on {n_in:,} of {n_all:,} input rows "
        f"in {time.perf_counter() - t0:.2f} s"
    )
    return Selection(done, how)


register_selective(rerun_rows)
