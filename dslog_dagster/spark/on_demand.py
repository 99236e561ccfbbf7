"""Lineage on demand for Spark steps: re-run a step under the Spark capture, name the stored rows.

A Spark step run with ``policy="on_demand"`` runs untracked (no id tap, no extra jobs) and its
output is stored numbered in the order Spark gave its rows. :func:`rerun_frames` is the
``"spark"`` :data:`~dslog_dagster.core.on_demand.Engine`: it re-runs the step with
:func:`~dslog_dagster.spark.capture_frame_outputs` on the recorded input versions (loaded with
their row ids, so the lineage names the stored input rows) and compares every recomputed
output with the stored one **as a multiset of rows**: Spark's row order is not stable across
runs (partitioning, shuffles, and the capture's own columns change it), so a row is matched
to a stored row of equal values (Spark's equality: NaN equals NaN, ``-0.0`` equals ``0.0``)
and its lineage is renamed to the stored row's id. Rows equal in every column are told apart
by their order only, so their lineages may be exchanged among them (any of them explains the
same values). Column names and types must be equal. A row in one and not the other refuses
the reconstruction: the code changed, the step is not deterministic, or it reads something
besides its inputs.

With selected rows (``rows``), the re-run reads only the input rows the selection can need:
:mod:`~dslog_dagster.spark.pushdown` pushes the selection down the plan as semijoins
(PROVision §V-C). The selected stored rows must come out of that re-run unchanged; when one
does not (an operator the push-down could not see through), this engine answers nothing and
the caller reconstructs in full.
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from dslog_dagster.core.combine import factored_table
from dslog_dagster.core.compression import compress
from dslog_dagster.core.on_demand import Rerun, register_engine
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.errors import ReconstructionError
from dslog_dagster.spark.capture import capture_frame_outputs
from dslog_dagster.spark.frame_capture import FrameCapture
from dslog_dagster.spark.pushdown import TAG, pushdown_columns, semijoin, semijoin_keys
from dslog_dagster.spark.rowid import ROW_ID, rows_by_id
from dslog_dagster.spark.staging import new_staging_dir, remove_staging_dir, staging_base
from dslog_dagster.spark.steps import ArrayFromFrame
from dslog_dagster.spark.stored_subset import (
    VALUE_TYPES,
    key_table,
    local_frame,
    read_rows,
    read_subset,
)

__all__ = [
    "ENGINE",
    "KEEP_ROWS",
    "LOCAL_MATCH_ROWS",
    "match_local",
    "match_rows",
    "remap_rows",
    "rerun_frames",
]

ENGINE = "spark"
"""The engine name deferred Spark operations record."""


def _outputs(value: Any, refuse: Any) -> list[Any]:
    outs = list(value) if isinstance(value, tuple | list) else [value]
    for v in outs:
        if isinstance(v, ArrayFromFrame) or not hasattr(v, "columns"):
            msg = f"it returns a `{type(v).__name__}`; on-demand Spark steps return DataFrames."
            raise refuse(msg)
    return outs


def _visible(df: DataFrame) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields if f.name != ROW_ID]


def match_rows(recomputed: DataFrame, stored: DataFrame, *, complete: bool) -> np.ndarray:
    """Pairs ``(recomputed row id, stored row id)`` of rows with equal values, shape ``(n, 2)``.

    Both frames carry ``ROW_ID``. Equal rows are paired in row-id order. ``complete``: every
    row of each side must find its partner (else rows of ``stored`` without one are left out,
    and of ``recomputed`` too). A pair with ``-1`` marks a row without a partner.
    """
    cols = [n for n, _ in _visible(stored)]
    r_cols = [F.col(f"`{c}`").alias(f"r{j}") for j, c in enumerate(cols)]
    s_cols = [F.col(f"`{c}`").alias(f"s{j}") for j, c in enumerate(cols)]
    r = recomputed.select(*r_cols, F.col(ROW_ID).alias("rid"))
    s = stored.select(*s_cols, F.col(ROW_ID).alias("sid"))
    rank_r = Window.partitionBy(*[f"r{j}" for j in range(len(cols))]).orderBy("rid")
    rank_s = Window.partitionBy(*[f"s{j}" for j in range(len(cols))]).orderBy("sid")
    r = r.withColumn("rk", F.row_number().over(rank_r))
    s = s.withColumn("sk", F.row_number().over(rank_s))
    cond = [r[f"r{j}"].eqNullSafe(s[f"s{j}"]) for j in range(len(cols))] + [r["rk"] == s["sk"]]
    how = "full_outer" if complete else "right_outer"
    pairs = r.join(s, on=cond, how=how).select(
        F.coalesce(F.col("rid"), F.lit(-1)).alias("rid"),
        F.coalesce(F.col("sid"), F.lit(-1)).alias("sid"),
    )
    table = pairs.toArrow()
    rid = np.asarray(table.column("rid").to_numpy(), dtype=np.int64)
    sid = np.asarray(table.column("sid").to_numpy(), dtype=np.int64)
    return np.stack([rid, sid], axis=1) if len(rid) else np.zeros((0, 2), np.int64)


KEEP_ROWS = 1_000_000
"""A reduced input of at least this many stored rows is computed once and kept (a local
checkpoint) for the selective re-run's passes; a smaller one is semijoined where it is read."""

LOCAL_MATCH_ROWS = 200_000
"""A selective re-run whose output has at most this many rows is matched to the selected rows
in this process (one collect, no shuffle); a larger one by :func:`match_rows` in Spark."""


def _key(v: Any) -> Any:
    """A value as a hashable key with Spark's equality: NaN equals NaN (``-0.0`` equals
    ``0.0`` already in Python), arrays and structs compare element by element."""
    if isinstance(v, float) and v != v:
        return _NAN
    if isinstance(v, bytearray):  # a binary column
        return bytes(v)
    if isinstance(v, tuple | list):  # a Row (struct) is a tuple
        return tuple(_key(x) for x in v)
    if isinstance(v, dict):  # a map: Spark cannot compare them, so no re-run gets here
        return tuple(sorted((_key(k), _key(x)) for k, x in v.items()))
    return v


_NAN = ("__dslog_nan__",)


def match_local(recomputed: Sequence[Sequence[Any]], stored: Sequence[Sequence[Any]]) -> np.ndarray:
    """:func:`match_rows` with ``complete=False`` on collected rows: each row is its visible
    values followed by its row id. Equal rows are paired in row-id order; a stored row without
    a partner is paired with ``-1``; recomputed rows without one are left out."""
    waiting: dict[Any, list[int]] = {}
    for row in sorted(recomputed, key=lambda r: int(r[-1])):
        waiting.setdefault(_key(tuple(row[:-1])), []).append(int(row[-1]))
    pairs = []
    for row in sorted(stored, key=lambda r: int(r[-1])):
        free = waiting.get(_key(tuple(row[:-1])))
        pairs.append((free.pop(0) if free else -1, int(row[-1])))
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def _remap_relation(rel: LineageRelation, to: np.ndarray, n_out: int) -> LineageRelation:
    new = to[rel.out_cols[0]]
    keep = new >= 0
    out = [new[keep], *[c[keep] for c in rel.out_cols[1:]]]
    shape = (n_out, *rel.out_shape[1:])
    return LineageRelation.from_columns(shape, rel.in_shape, out, [c[keep] for c in rel.in_cols])


def remap_rows(table: LineageTable, pairs: np.ndarray, n_out: int) -> LineageTable:
    """``table`` with output row ``r`` renamed ``s`` for each pair ``(r, s)``, over an output
    of ``n_out`` rows; rows without a pair are left out. A factored table (row × column
    lineage) stays factored: only its row tables are renamed."""
    to = np.full(table.out_shape[0], -1, dtype=np.int64)
    if len(pairs):
        to[pairs[:, 0]] = pairs[:, 1]
    if table.factors:
        parts = []
        for rows, cols in table.factors:
            rel = _remap_relation(rows.decompress(), to, n_out)
            parts.append((compress(rel), cols))
        return factored_table(parts)
    return compress(_remap_relation(table.decompress(), to, n_out))


def _capture(
    rerun: Rerun, frames: Sequence[DataFrame], rows: Sequence[int], *, collect: bool = False
) -> list[FrameCapture]:
    """The step captured on ``frames`` (named as its recorded inputs of ``rows`` rows), in
    lists mode; ``collect``: its output collected into this process (a selective re-run's few
    rows, see :func:`~dslog_dagster.spark.capture.capture_frame_outputs`)."""
    names = [f"in{i}" for i in range(len(frames))]

    def run(**tracked: Any) -> list[Any]:
        return _outputs(rerun.call(*[tracked[n] for n in names]), rerun.refuse)

    try:
        return capture_frame_outputs(
            run,
            dict(zip(names, frames, strict=True)),
            input_rows=dict(zip(names, rows, strict=True)),
            aggregate="lists",
            collect=collect,
        )
    except ReconstructionError:
        raise
    except Exception as e:  # the step, or the capture of it, failed on the recorded inputs
        msg = f"re-running it under the Spark capture failed: {e}"
        raise rerun.refuse(msg) from e


def _selected_inputs(
    rerun: Rerun,
    frames: list[DataFrame],
    output: int,
    selected: Callable[[], DataFrame],
    stored_schema: StructType,
    got: Sequence[Any],
    in_rows: Sequence[int],
    staging: str | None,
) -> list[DataFrame] | None:
    """The inputs semijoined with the selected rows (see :mod:`.pushdown`); ``None`` when
    the selection reaches no input (a full re-run would read the same). ``selected``: the
    selected rows as a frame (made on first use; of schema ``stored_schema``), ``got``: the
    same rows, collected; ``staging``: a folder the executors read, where
    :func:`~dslog_dagster.spark.stored_subset.read_subset` may write the rows it keeps.

    An input is read in this process when :mod:`.stored_subset` can (a plain stored scan,
    simple keys) and either its rows can be staged (a staging folder, columns of
    :data:`~dslog_dagster.spark.stored_subset.VALUE_TYPES`) or it has at least
    :data:`KEEP_ROWS` stored rows (then it is kept as a local frame by a checkpoint). Else
    an input of at least :data:`KEEP_ROWS` rows is semijoined in Spark and checkpointed, and a
    smaller one is semijoined where it is read. The keys reach Spark as one local frame of
    their distinct values when they are simple (no job deduplicates them), else as the
    selected rows, deduplicated by Spark."""
    names = [f"in{i}" for i in range(len(frames))]
    tagged = [f.drop(ROW_ID).alias(TAG + n) for f, n in zip(frames, names, strict=True)]
    outs = _outputs(rerun.call(*tagged), rerun.refuse)
    on = pushdown_columns(outs[output], names)
    if not any(on.values()):
        return None
    reduced = []
    for i, (f, n) in enumerate(zip(frames, names, strict=True)):
        if not on[n]:
            reduced.append(f)
            continue
        keep = in_rows[i] >= KEEP_ROWS
        keys = key_table(got, stored_schema, on[n])
        # staged as files, even a small input is cheaper read here: its semijoin in Spark is a
        # job (a broadcast of the keys) and a scan in each of the capture's passes; as a local
        # frame it would be kept by a job of its own
        stageable = staging is not None and all(
            type(fld.dataType) in VALUE_TYPES for fld in f.schema.fields
        )
        local = read_subset(f, keys, staging) if keys is not None and (keep or stageable) else None
        if local is not None:
            reduced.append(local)
            continue
        key_frame = local_frame(f.sparkSession, keys) if keys is not None else None
        part = semijoin(f, selected(), on[n]) if key_frame is None else semijoin_keys(f, key_frame)
        # a big input computed once (one scan); the capture's passes then read the few kept
        # rows. A small one is read again by each pass: cheaper than the job that keeps it
        reduced.append(part.localCheckpoint(eager=True) if keep else part)
    return reduced


def rerun_frames(
    rerun: Rerun, rows: dict[int, np.ndarray] | None
) -> dict[tuple[int, int], LineageTable]:
    """The ``"spark"`` engine (see the module docstring and
    :data:`~dslog_dagster.core.on_demand.Engine`)."""
    frames = list(rerun.inputs)
    for k, f in enumerate(frames):
        if not isinstance(f, DataFrame) or ROW_ID not in f.columns:
            msg = (
                f"its input {k} did not load as a stored Spark frame with row ids; load values "
                "with DSLogIOManager.value_loader(frames=True)."
            )
            raise rerun.refuse(msg)
    in_rows = [int(a.shape[0]) for a in rerun.records]
    considered = rerun.mode == "considered"
    if rows is None:
        caps = _capture(rerun, frames, in_rows)
        try:
            return _full(rerun, caps, considered)
        finally:
            for c in caps:
                c.release()
    ((output, picked),) = rows.items()
    stored = rerun.load_output(output)
    # the selected rows, read once and kept (a local frame read by this process when the
    # stored output is a plain local scan, else kept in the JVM): the semijoins and the
    # matching below would otherwise each re-read the stored output to find them
    read = read_rows(stored, picked)
    if read is None:
        frame = rows_by_id(stored, picked)
        got = frame.collect()

        def selected() -> DataFrame:
            return frame

    else:
        table, got = read

        @functools.cache
        def selected() -> DataFrame:
            # only a semijoin on keys that are not simple, or matching a big re-run's output
            # in Spark, needs the rows as a frame: not made otherwise
            local = local_frame(stored.sparkSession, table)
            return rows_by_id(stored, picked) if local is None else local

    base = staging_base(stored.sparkSession)
    staging = None if base is None else new_staging_dir(base)
    try:
        reduced = _selected_inputs(
            rerun, frames, output, selected, stored.schema, got, in_rows, staging
        )
        if reduced is None:
            return {}
        return _selected_tables(rerun, reduced, in_rows, output, stored, selected, got, len(picked))
    finally:
        if staging is not None:  # the kept rows, read by the capture's passes only
            remove_staging_dir(staging)


def _selected_tables(
    rerun: Rerun,
    reduced: list[DataFrame],
    in_rows: Sequence[int],
    output: int,
    stored: DataFrame,
    selected: Callable[[], DataFrame],
    got: Sequence[Any],
    n_picked: int,
) -> dict[tuple[int, int], LineageTable]:
    """The lineage of the ``n_picked`` selected rows (``selected()``, collected as ``got``)
    from a capture of the step on the ``reduced`` inputs (of ``in_rows`` stored rows each),
    named by the stored rows' ids; empty when a selected row does not come out of the
    reduced run."""
    considered = rerun.mode == "considered"
    # the reduced inputs hold at most stored_subset.LOCAL_ROWS rows each: their run's output
    # is collected here, not written and read back
    caps = _capture(rerun, reduced, in_rows, collect=True)
    try:
        cap = caps[output]
        visible = _visible(stored)
        _check_schema(rerun, output, cap, visible, cap.visible())
        if cap.n_rows <= LOCAL_MATCH_ROWS:
            names = [n for n, _ in visible]
            mine = _local_rows(cap, stored.schema, names)
            if mine is None:
                cols = [F.col(f"`{c}`") for c in names] + [F.col(ROW_ID)]
                mine = _collected(cap.frame_with_row_id.select(*cols))
            theirs = [tuple(r[c] for c in [*names, ROW_ID]) for r in got]
            pairs = match_local(mine, theirs)
        else:
            pairs = match_rows(cap.frame_with_row_id, selected(), complete=False)
        if len(pairs) != n_picked or (pairs < 0).any():
            return {}  # a selected row did not come out of the reduced run: reconstruct all
        n_out = int(rerun.op.outputs[output].shape[0])
        return {
            (output, i): remap_rows(_table(rerun, cap, i, considered), pairs, n_out)
            for i in range(len(reduced))
        }
    finally:
        for c in caps:
            c.release()


def _local_rows(
    cap: FrameCapture, schema: StructType, names: Sequence[str]
) -> list[tuple[Any, ...]] | None:
    """The re-run's output rows (``names``, then ``ROW_ID``) as this process has them: the
    rows its pass collected, or read from the files it staged
    (:meth:`~dslog_dagster.spark.frame_capture.FrameCapture.local_rows`), without analysing
    ``cap.frame_with_row_id`` and running a job to collect it (0.4 s of a 3.4 s trace).
    ``None`` when the pass left neither, or a column (``schema``: the stored output's, equal
    to the re-run's) is not of a type whose values Arrow gives as ``collect`` does
    (:data:`~dslog_dagster.spark.stored_subset.VALUE_TYPES`)."""
    types = {f.name: type(f.dataType) for f in schema.fields}
    if any(types.get(n) not in VALUE_TYPES for n in names):
        return None
    table = cap.local_rows(names)
    if table is None:
        return None
    return list(zip(*[c.to_pylist() for c in table.columns], strict=True))


def _collected(frame: DataFrame) -> list[tuple[Any, ...]]:
    """``frame``'s rows as tuples of the values its ``collect`` gives. Through Arrow when
    every column is of a type whose Python values Arrow and ``collect`` give alike
    (:data:`~dslog_dagster.spark.stored_subset.VALUE_TYPES`): one batch, no ``Row`` per row
    (``collect`` spent 0.4 s of a 3.9 s trace on 1,000 rows, half of it building ``Row``
    objects); else through ``collect``."""
    if all(type(f.dataType) in VALUE_TYPES for f in frame.schema.fields):
        table = frame.toArrow()
        return list(zip(*[c.to_pylist() for c in table.columns], strict=True))
    return [tuple(r) for r in frame.collect()]


def _table(rerun: Rerun, cap: FrameCapture, i: int, considered: bool) -> LineageTable:
    """The captured table of input ``i``, checked to name the recorded input version."""
    t = cap.table(f"in{i}", considered=considered)
    rec = rerun.records[i]
    if tuple(t.in_shape) != tuple(rec.shape):
        why = (
            f"the re-run read `{rec.name}` as shape {t.in_shape}, but version `{rec.version}` "
            f"is recorded with shape {rec.shape} (the stored value changed)."
        )
        raise rerun.refuse(why)
    return t


def _check_schema(
    rerun: Rerun,
    k: int,
    cap: FrameCapture,
    theirs: list[tuple[str, str]],
    mine: list[tuple[str, str]] | None = None,
) -> None:
    """Refuse a re-run whose output ``k`` has other columns than the stored version's
    (``theirs``); ``mine``: the re-run's, when known without its frame."""
    rec = rerun.op.outputs[k]
    if mine is None:
        mine = _visible(cap.frame_with_row_id)
    if mine != theirs:
        msg = (
            f"re-running it gives `{rec.name}` the columns {mine}, not the stored version "
            f"`{rec.version}`'s {theirs} (the code or its inputs changed)."
        )
        raise rerun.refuse(msg)


def _full(
    rerun: Rerun, caps: list[FrameCapture], considered: bool
) -> dict[tuple[int, int], LineageTable]:
    rec = rerun.op
    if len(caps) != len(rec.outputs):
        msg = f"it now returns {len(caps)} output(s), not {len(rec.outputs)}."
        raise rerun.refuse(msg)
    tables: dict[tuple[int, int], LineageTable] = {}
    for k, (cap, out) in enumerate(zip(caps, rec.outputs, strict=True)):
        stored = rerun.load_output(k)
        _check_schema(rerun, k, cap, _visible(stored))
        pairs = match_rows(cap.frame_with_row_id, stored, complete=True)
        missing = int((pairs[:, 1] < 0).sum())
        extra = int((pairs[:, 0] < 0).sum())
        if missing or extra or cap.n_rows != out.shape[0]:
            msg = (
                f"re-running it does not give the stored `{out.name}` version `{out.version}` "
                f"as a multiset of rows ({missing} recomputed row(s) not stored, {extra} stored "
                "row(s) not recomputed): the step is not deterministic, or it reads something "
                "besides its inputs."
            )
            raise rerun.refuse(msg)
        n_out = int(out.shape[0])
        identity = bool((pairs[:, 0] == pairs[:, 1]).all())
        for i in range(len(rerun.inputs)):
            t = _table(rerun, cap, i, considered)
            tables[(k, i)] = t if identity else remap_rows(t, pairs, n_out)
    return tables


register_engine(ENGINE, rerun_frames)
