"""``capture_frames``: run PySpark code and record the cell lineage of its output.

A DataFrame is a 2-D array in the lineage model: cell ``(row, column)``, where the row index is
the frame's dense row id (:mod:`dslog_dagster.spark.rowid`) and the column index its position
among the visible columns. For every input the capture returns the relation
``output (row, column) ← input (row, column)`` twice, as ProvRC tables:

* **contributing** — the input cells the output cell's value was computed from;
* **considered** — those plus the cells that only filtered, joined, grouped or ordered the rows
  (PROVision's *considered* inputs), so a query can ask for either.

Cell lineage is row lineage × column lineage. Row lineage is carried by provenance slots
(:mod:`dslog_dagster.spark.frame`) and compressed per partition on the executors
(:mod:`dslog_dagster.spark.lineage`); column lineage (a few pairs) comes from the analyzed plan.
The product is kept factored (:func:`~dslog_dagster.core.combine.factored_table`): stored as
its row and column tables and queried on them, so neither a cell pair nor a product row is
formed unless a reader asks for the table's ProvRC rows.
"""

import atexit
import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster.core import background
from dslog_dagster.core.combine import factored_table
from dslog_dagster.core.compression import compress, union_tables
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.errors import InvalidRelationError, UnsupportedFrameOperationError
from dslog_dagster.spark.frame import CaptureContext, NeedLists, TrackedFrame
from dslog_dagster.spark.idtap import TapFailed, tap_ready, tapped_ids, tapping
from dslog_dagster.spark.lineage import (
    RangeColumns,
    RangesNotExact,
    RowTables,
    refetch_ids,
    row_tables,
    write_with_lineage,
)
from dslog_dagster.spark.plan import ColumnLineage, slot_name
from dslog_dagster.spark.rowid import MID, ROW_ID, RowIds, dense_id, mark, with_row_id
from dslog_dagster.spark.summaries import SummariesMissing

__all__ = ["FrameCapture", "FrameInput", "capture_frames", "empty_table", "full_table"]

log = logging.getLogger(__name__)

OnUnknown = Literal["raise", "all_to_all"]
Aggregate = Literal["auto", "lists"]


class _RangesFailed(Exception):
    """Some group's range summary was not exact; the capture reruns with lists."""


class _SummariesFailed(Exception):
    """Recorded range summaries did not give every row's group one summary (see
    :mod:`~dslog_dagster.spark.summaries`); the capture reruns carrying them as columns."""


@dataclass(frozen=True, slots=True)
class FrameInput:
    """One input of a capture: its name, visible columns and row count."""

    name: str
    columns: tuple[str, ...]
    n_rows: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, len(self.columns))


@dataclass
class FrameCapture:
    """The result of :func:`capture_frames`.

    Attributes:
        frame: the output as an ordinary DataFrame (only the user's columns). Its rows are
            the ones the capture's pass wrote to staging files (local master) or cached, so it
            always shows the rows the lineage describes. Made on first use (reading the
            staging files costs a file listing and a few plan analyses, ~50 ms, which storing
            the capture with ``write_frame`` does not need); after ``release`` of a staged
            capture it is gone.
        frame_with_row_id: the same rows plus the dense row-id column ``ROW_ID`` (what the IO
            manager stores, see :func:`dslog_dagster.io_managers.spark_frames.write_frame`).
        columns: the output's columns; ``shape == (n_rows, len(columns))``.
        inputs: the inputs, in the order given (names ``input0``... for a sequence).
        contributing / considered: ``{input name: LineageTable}`` of shape
            ``(n_rows, len(columns)) ← input.shape``; ``considered`` ⊇ ``contributing``.
        column_lineage: ``{output column: {input name: [input columns]}}`` (contributing).
        flagged: some step had no lineage rule and was recorded all-to-all
            (``on_unknown="all_to_all"``); ``flagged_ops`` names those steps.
        timings: seconds for ``plan`` (input ids, user code building the plan), ``pass``
            (the Spark pass over the output: ``write`` — computing and staging its rows, or
            marking them for the cache — then ``lineage`` — row ids and row lineage
            compressed per partition — then ``refetch`` — the ids of aggregated groups whose
            range check failed, found by one join job) and ``product`` (row × column lineage
            on the driver); ``refetched_rows`` (how many output rows that was, when any) and
            ``retried_with_lists`` when aggregations were run again with lists.
    """

    columns: tuple[str, ...]
    n_rows: int
    inputs: tuple[FrameInput, ...]
    contributing: dict[str, LineageTable]
    considered: dict[str, LineageTable]
    column_lineage: dict[str, dict[str, list[str]]]
    flagged: bool = False
    flagged_ops: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    _cached: list[RowIds] = field(default_factory=list, repr=False)
    _staged: "StagedOutput | None" = field(default=None, repr=False)
    _frames: Callable[[], tuple[DataFrame, DataFrame]] | None = field(default=None, repr=False)
    _made: tuple[DataFrame, DataFrame] | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, len(self.columns))

    def _output(self) -> tuple[DataFrame, DataFrame]:
        if self._made is None:
            if self._frames is None:
                msg = (
                    "This capture was released, and its staged rows with it; read the stored "
                    "frame instead (read_frame / the IO manager), or use `frame` before "
                    "`release()`."
                )
                raise InvalidRelationError(msg)
            self._made = self._frames()
        return self._made

    @property
    def frame(self) -> DataFrame:
        return self._output()[0]

    @property
    def frame_with_row_id(self) -> DataFrame:
        return self._output()[1]

    def _input_name(self, input: int | str) -> str:
        if isinstance(input, int):
            return self.inputs[input].name
        if input not in self.contributing:
            msg = f"No input `{input}`; the inputs are {[i.name for i in self.inputs]}."
            raise InvalidRelationError(msg)
        return input

    def table(self, input: int | str = 0, *, considered: bool = False) -> LineageTable:
        """The ProvRC table of ``output ← input`` (index or name)."""
        name = self._input_name(input)
        return (self.considered if considered else self.contributing)[name]

    def relation(self, input: int | str = 0, *, considered: bool = False) -> LineageRelation:
        """The decompressed relation (for tests and small frames)."""
        return self.table(input, considered=considered).decompress()

    def register(
        self,
        log: Any,
        output: str,
        inputs: Mapping[str, str] | Sequence[str] | None = None,
        *,
        op_name: str = "spark",
        considered: bool = False,
        version: str | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> Any:
        """Register the capture as one operation in a DSLog session or lineage store.

        Args:
            log: a :class:`~dslog_dagster.core.api.DSLog` or
                :class:`~dslog_dagster.core.store.LineageStore`.
            output: the output array's name (e.g. ``naming.array_name(asset_key)``).
            inputs: array names of the inputs (by input name, or in order); default: the
                inputs' own names. Input arrays not registered yet are registered with their
                shapes.
            considered: register the considered tables instead of the contributing ones.
            version: version of the output array (e.g. the Dagster run id).
        """
        from dslog_dagster.core.api import DSLog
        from dslog_dagster.core.store import LineageStore

        store: LineageStore = log.store if isinstance(log, DSLog) else log
        if inputs is None:
            names = {i.name: i.name for i in self.inputs}
        elif isinstance(inputs, Mapping):
            names = {i.name: inputs[i.name] for i in self.inputs}
        else:
            names = {i.name: n for i, n in zip(self.inputs, inputs, strict=True)}
        in_recs = []
        for inp in self.inputs:
            try:
                rec = store.get_array(names[inp.name])
            except KeyError:
                rec = store.register_array(names[inp.name], inp.shape, "float64")
            if rec.shape != inp.shape:
                msg = (
                    f"Input array `{rec.name}` is registered with shape {rec.shape}, but the "
                    f"captured frame has shape {inp.shape}; register the version of the input "
                    "that was read (e.g. `store.register_array(name, shape, version=...)`) first."
                )
                raise InvalidRelationError(msg)

            in_recs.append(rec)
        out = store.register_array(output, self.shape, "float64", version=version)
        tables = self.considered if considered else self.contributing
        lineage = {(output, names[k]): t for k, t in tables.items()}
        op = store.register_operation(
            op_name,
            in_recs,
            [out],
            lineage,
            args={**(args or {}), "considered": considered, "flagged": self.flagged},
            capture_method="spark-all-to-all" if self.flagged else "spark",
            timings=self.timings,
        )
        if isinstance(log, DSLog):
            log._graph_key = None
        return op

    def release(self) -> None:
        """Drop the cached rows of the inputs (ids assigned here) and of the output, and the
        output's staging files (stored copies made by ``write_frame`` stay)."""
        for c in self._cached:
            c.release()
        self._cached.clear()
        if self._staged is not None and self._staged.owned:
            shutil.rmtree(self._staged.path, ignore_errors=True)
            _STAGING.discard(self._staged.path)
            self._staged = None
            self._frames = None
            self._made = None


_STAGING: set[str] = set()
"""Staging directories of this process not yet moved or released (removed at exit)."""


@atexit.register
def _remove_staging() -> None:
    for path in list(_STAGING):
        shutil.rmtree(path, ignore_errors=True)
    _STAGING.clear()


STAGED_META = "_dslog_row_ids.json"
"""Side file of a frame stored with :data:`~dslog_dagster.spark.rowid.MID` instead of row ids:
the partition offsets that turn ``MID`` into dense ids (Spark skips files named ``_*``)."""


@dataclass(frozen=True)
class StagedOutput:
    """A capture's output as written in its one pass: Parquet files with the user's columns,
    ``MID`` (partition << 33 | index) and the slot columns, plus the partition offsets that
    make ``MID`` dense row ids. :func:`~dslog_dagster.io_managers.spark_frames.write_frame`
    hard-links (or copies) the files to the asset's place instead of writing the rows again."""

    path: str
    offsets: tuple[int, ...]
    columns: tuple[str, ...]
    owned: bool  # a staging directory of the capture (deleted by ``release``)
    schema: Any = None  # the files' StructType (saves reading footers to infer it)

    def frames(self, read: Callable[[], DataFrame]) -> tuple[DataFrame, DataFrame]:
        """The output without and with ``ROW_ID``, from the staged files as ``read()`` gives
        them (the pass reads them at most once, for refetching too)."""
        df = read()
        # drop the few hidden columns rather than select the many user ones: every column
        # named costs JVM round trips
        names = self.schema.names if self.schema is not None else df.columns
        user = set(self.columns)
        hidden = [c for c in names if c not in user]
        with_id = df.withColumn(ROW_ID, dense_id(list(self.offsets)))
        return df.drop(*hidden), with_id.drop(*hidden)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _can_stage(df: DataFrame, columns: Sequence[str]) -> bool:
    """Whether the output may be written to a driver-local staging directory in its pass:
    a local master (executors share the driver's disk) and column names Parquet can hold."""
    master = str(df.sparkSession.sparkContext.master)
    lower = [c.lower() for c in columns]
    return master.startswith("local") and len(set(lower)) == len(lower) and MID not in columns


def empty_table(out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> LineageTable:
    """A table with no pairs."""
    l, m = len(out_shape), len(in_shape)
    z = [np.zeros((l, 0), np.int64)] * 2 + [np.zeros((m, 0), np.int64)] * 6
    return LineageTable(out_shape, in_shape, "provrc", 0, 0, *z)


def full_table(out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> LineageTable:
    """Every output cell ← every input cell (one ProvRC row)."""
    if 0 in out_shape or 0 in in_shape:
        return empty_table(out_shape, in_shape)
    l, m = len(out_shape), len(in_shape)

    def col(values: Sequence[int], k: int) -> np.ndarray:
        return np.asarray(values, np.int64).reshape(k, 1)

    n = int(np.prod(out_shape)) * int(np.prod(in_shape))
    return LineageTable(
        out_shape,
        in_shape,
        "provrc",
        1,
        n,
        col([0] * l, l),
        col([d - 1 for d in out_shape], l),
        col([-1] * m, m),
        col([1] * m, m),
        col([0] * m, m),
        col([1] * m, m),
        col([0] * m, m),
        col([d - 1 for d in in_shape], m),
    )


def _prepare_input(
    df: DataFrame, cached: list[RowIds], n_rows: int | None
) -> tuple[DataFrame, int]:
    """The input with dense row ids (its own ``ROW_ID``, or numbered and cached) and its rows."""
    if ROW_ID in df.columns:
        return df, (df.count() if n_rows is None else int(n_rows))
    ids = with_row_id(df)
    cached.append(ids)
    return ids.frame, ids.n


def _track_input(
    ctx: CaptureContext,
    index: int,
    df: DataFrame,
    cached: list[RowIds],
    n_rows: int | None,
    prepared: tuple[DataFrame, int, bool] | None = None,
) -> tuple[TrackedFrame, FrameInput, str]:
    if prepared is None:
        prepared = (*_prepare_input(df, cached, n_rows), _dense_ids(df, n_rows))
    ided, n, dense = prepared
    sid = ctx.new_slot(index)
    names = ided.columns
    user = [c for c in names if c != ROW_ID]
    # the id column becomes the slot where it stands (one JVM call; a select naming every
    # column costs round trips per column)
    d = ided.withColumnRenamed(ROW_ID, slot_name(sid))
    pos = iter(range(len(user)))
    infos: list[Any] = [
        slot_name(sid) if c == ROW_ID else ColumnLineage(frozenset({(sid, next(pos))}))
        for c in names
    ]
    frame = TrackedFrame(ctx, d, infos, (), (index,), dense=(sid,) if dense else ())
    return frame, FrameInput("", tuple(user), n), slot_name(sid)


def _dense_ids(df: DataFrame, n_rows: int | None) -> bool:
    """Whether the input's row ids are never null: ids the capture numbers, or a stored
    frame's (the caller knows its rows, as the IO manager does)."""
    return ROW_ID not in df.columns or n_rows is not None


def capture_frames(
    func: Callable[..., Any],
    frames: Mapping[str, DataFrame] | Sequence[DataFrame],
    *,
    on_unknown: OnUnknown = "raise",
    input_rows: Mapping[str, int] | Sequence[int] | None = None,
    aggregate: Aggregate = "auto",
    **kwargs: Any,
) -> FrameCapture:
    """Run ``func`` on tracked versions of ``frames`` and capture the output's cell lineage.

    ``func`` receives one :class:`~dslog_dagster.spark.frame.TrackedFrame` per input (as
    keyword arguments for a mapping, positionally for a sequence, plus ``kwargs``) and must
    return a frame derived from them. A frame with a ``ROW_ID`` column (what
    :func:`~dslog_dagster.io_managers.spark_frames.read_frame` gives with ``row_id=True``) keeps
    those ids; any other input is numbered 0..n-1 in its current order (cached for the
    capture). Nothing is collected to the driver but counts and compressed tables.

    ``input_rows`` (by input name, or in order) gives the row counts of inputs that carry
    ``ROW_ID`` when the caller knows them (the IO manager does: ``FrameInfo.rows``), which
    saves one counting job per input. It also vouches that those ids are never null (as in
    every frame dslog stores), which lets aggregations count ids with one ``count(1)``.

    ``aggregate`` says how ``groupBy().agg`` carries row ids. ``"auto"`` (default) first
    summarises each group's ids as a range ``lo..hi`` with cheap hash aggregates, which is
    exact when a check in the same pass says so (see
    :meth:`~dslog_dagster.spark.frame.TrackedGroupedData._range_agg`); the ids of groups that
    fail the check (keys not clustered by row id) are found by one join of the aggregation's
    input with those groups' keys (:func:`~dslog_dagster.spark.lineage.refetch_ids`;
    ``timings["refetched_rows"]``). When a later step needs the ids as lists (an aggregation
    or window over an aggregation), or a failed range cannot be refetched (see
    :func:`_capture_once`), it runs ``func`` again with lists and makes one more pass.
    ``"lists"`` collects the ids at once (``collect_list``). ``func`` may be called twice; it
    only builds a plan. The lineage is the same in all cases; ``timings`` has
    ``retried_with_lists`` when the second run happened. With the id tap, an aggregation's
    summaries are recorded rather than carried (:mod:`~dslog_dagster.spark.summaries`); when
    they do not account for every row, ``func`` runs once more carrying them
    (``retried_carrying_summaries``).

    Raises:
        UnsupportedFrameOperationError: ``func`` used an operation without a lineage rule
            (with ``on_unknown="raise"``), or returned something that is not a tracked frame.
    """
    if on_unknown not in ("raise", "all_to_all"):
        msg = f"on_unknown must be 'raise' or 'all_to_all', not {on_unknown!r}."
        raise ValueError(msg)
    if aggregate not in ("auto", "lists"):
        msg = f"aggregate must be 'auto' or 'lists', not {aggregate!r}."
        raise ValueError(msg)
    t0 = time.perf_counter()
    cached: list[RowIds] = []
    named = (
        list(frames.items())
        if isinstance(frames, Mapping)
        else [(f"input{i}", f) for i, f in enumerate(frames)]
    )
    prepared: list[tuple[DataFrame, int, bool]] = []
    for i, (name, df) in enumerate(named):
        if not isinstance(df, DataFrame):
            msg = f"Input `{name}` is a `{type(df).__name__}`, not a Spark DataFrame."
            raise InvalidRelationError(msg)
        known = None
        if input_rows is not None:
            known = input_rows[name] if isinstance(input_rows, Mapping) else input_rows[i]
        prepared.append((*_prepare_input(df, cached, known), _dense_ids(df, known)))
    mode: Literal["ranges", "lists"] = "ranges" if aggregate == "auto" else "lists"
    record = True  # tapped aggregations record their summaries (spark.summaries)
    retried: list[str] = []
    while True:
        try:
            with _tap_root(mode, prepared) as root:
                cap = _capture_once(
                    func,
                    frames,
                    named,
                    prepared,
                    cached,
                    on_unknown,
                    mode,
                    kwargs,
                    t0,
                    root,
                    record,
                )
        except _SummariesFailed as e:
            if not record:  # pragma: no cover (only recorded summaries signal it)
                raise
            log.info("Recorded range summaries not used (%s); carrying them instead.", e)
            retried.append(type(e).__name__)
            record = False
            continue
        except (NeedLists, _RangesFailed) as e:
            if mode == "lists":  # pragma: no cover (lists mode never signals)
                raise
            retried.append(type(e).__name__)
            mode = "lists"
            continue
        if mode == "lists" and retried:
            cap.timings["retried_with_lists"] = 1.0
        if "_SummariesFailed" in retried:
            cap.timings["retried_carrying_summaries"] = 1.0
        return cap


@contextlib.contextmanager
def _tap_root(mode: str, prepared: list[tuple[DataFrame, int, bool]]) -> Iterator[str | None]:
    """A directory for the id taps of one run (removed after it), or None: lists mode, or a
    session without the tap."""
    if mode != "ranges" or not prepared or not tap_ready(prepared[0][0].sparkSession):
        yield None
        return
    root = tempfile.mkdtemp(prefix="dslog-tap-")
    try:
        yield root
    finally:
        # a worker removes the files (unlinking a capture's dozen files took ~4 ms of it);
        # the pool's threads finish their tasks before the interpreter exits, and once it is
        # exiting (no new tasks) they are removed here
        try:
            background.submit(shutil.rmtree, root, True)
        except RuntimeError:
            shutil.rmtree(root, ignore_errors=True)


def _capture_once(
    func: Callable[..., Any],
    frames: Mapping[str, DataFrame] | Sequence[DataFrame],
    named: list[tuple[str, DataFrame]],
    prepared: list[tuple[DataFrame, int, bool]],
    cached: list[RowIds],
    on_unknown: OnUnknown,
    mode: Literal["ranges", "lists"],
    kwargs: Mapping[str, Any],
    t0: float,
    tap_root: str | None,
    record: bool = True,
) -> FrameCapture:
    """One run of ``func`` and one pass over its output (see :func:`capture_frames`);
    aggregations record their ids under ``tap_root`` (:mod:`~dslog_dagster.spark.idtap`;
    None: no tap)."""
    ctx = CaptureContext(
        on_unknown=on_unknown, aggregate=mode, tap_root=tap_root, record_summaries=record
    )
    tracked: list[TrackedFrame] = []
    inputs: list[FrameInput] = []
    for i, ((name, df), prep) in enumerate(zip(named, prepared, strict=True)):
        t, info, _ = _track_input(ctx, i, df, cached, None, prep)
        tracked.append(t)
        inputs.append(FrameInput(name, info.columns, info.n_rows))
    if isinstance(frames, Mapping):
        result = func(**{n: t for (n, _), t in zip(named, tracked, strict=True)}, **kwargs)
    else:
        result = func(*tracked, **kwargs)
    if not isinstance(result, TrackedFrame):
        msg = (
            f"The captured function returned a `{type(result).__name__}`, not a frame derived "
            "from its tracked inputs; build the output from the frames it receives (a frame "
            "made with spark.sql/createDataFrame has no lineage to them)."
        )
        raise UnsupportedFrameOperationError(msg)
    t1 = time.perf_counter()
    infos = result._infos
    user_pos = [p for p, i in enumerate(infos) if not isinstance(i, str)]
    columns = tuple(result.columns)
    slot_names = [i for i in infos if isinstance(i, str)]
    # which (output column, input column) pairs each set of slots carries, per input and mode
    plan: dict[tuple[str, str], list[tuple[tuple[int, ...], list[tuple[int, int]]]]] = {}
    needed: dict[tuple[int, ...], int] = {}
    for i, inp in enumerate(inputs):
        if result._a2a:
            continue
        for which in ("contrib", "consid"):
            pairs: dict[tuple[int, int], set[int]] = {}
            for j, p in enumerate(user_pos):
                lin = infos[p]
                assert isinstance(lin, ColumnLineage)
                for s, c in lin.contrib if which == "contrib" else lin.full():
                    if ctx.slot_input[s] == i:
                        pairs.setdefault((j, c), set()).add(s)
            by_slots: dict[tuple[int, ...], list[tuple[int, int]]] = {}
            for col_pair, ss in pairs.items():
                by_slots.setdefault(tuple(sorted(ss)), []).append(col_pair)
            plan[(inp.name, which)] = sorted(by_slots.items())
            for key in by_slots:
                needed.setdefault(key, i)
    # one group per slot: a cell whose rows come from several slots of one input (a
    # self-join, a frame joined with its own aggregate) gets the exact union of their tables
    # (union_tables with shared pairs), so every range slot can be refetched on its own
    slot_input: dict[int, int] = {}
    for k, i in needed.items():
        for sl in k:
            slot_input.setdefault(sl, i)
    keys = [(sl,) for sl in sorted(slot_input)]
    # range slots whose failed rows cannot be refetched (no RangeSource) must pass their
    # check on every row, else the capture reruns
    checked = sorted(s for s in result._ranges if s in slot_input and s not in ctx.range_src)
    kinds = [_slot_kind(k[0], result._arrays, result._ranges) for k in keys]
    n_ins = [inputs[slot_input[k[0]]].n_rows for k in keys]
    # per group: the slot's column, or a range slot's summary columns
    id_columns: list[str | RangeColumns] = [
        _range_columns(ctx, k[0]) if kind == "range" else slot_name(k[0])
        for k, kind in zip(keys, kinds, strict=True)
    ]
    ok_names = [cast(str, _range_columns(ctx, s).ok) for s in checked]
    user_names = [c for c in result._df.columns if c not in slot_names]
    staged: StagedOutput | None = None
    path = ""
    teed: RowTables | None = None
    source: Callable[[], Any] | None = None
    try:
        if _can_stage(result._df, user_names):
            # the pass writes the output once (rows, MID, slots) with Spark's writer and
            # compresses the row lineage of every slot from those files; write_frame moves
            # them into place
            path = tempfile.mkdtemp(prefix="dslog-capture-")
            _STAGING.add(path)
            out = result._df.withColumn(MID, F.monotonically_increasing_id())
            with tapping(out.sparkSession, ctx.tap_dirs):
                teed = write_with_lineage(out, path, id_columns, kinds, n_ins, ok_names)
            schema = out.schema
            # read back only when needed (refetching by a join, the capture's frames): a file
            # listing and an analysis the usual store-and-go use does not pay
            source = _Once(partial(out.sparkSession.read.schema(schema).parquet, path))
        else:
            if any(isinstance(c, RangeColumns) and c.summary is not None for c in id_columns):
                # the executors compress from columns: the summaries must be carried
                msg = "the output is not staged (column names Parquet cannot hold)"
                raise SummariesMissing(msg)
            marked = mark(result._df)
            source = _Once(lambda: marked)
        t_write = time.perf_counter()
        if teed is not None:
            got = teed
        else:
            groups = [
                (_slot_column(c, kind), kind, n)
                for c, kind, n in zip(id_columns, kinds, n_ins, strict=True)
            ]
            got = row_tables(source(), groups, [F.col(_quote(o)) for o in ok_names])
    except RangesNotExact:
        _discard(path, source)
        raise _RangesFailed from None
    except SummariesMissing as e:
        _discard(path, source)
        raise _SummariesFailed(str(e)) from None
    offsets, tables = got.offsets, list(got.tables)
    t_lineage = time.perf_counter()
    try:
        assert source is not None
        tapped = _found_again(ctx, got, keys, id_columns, n_ins, offsets, tables, path, source)
    except SummariesMissing as e:
        _discard(path, source)
        raise _SummariesFailed(str(e)) from None
    per_slot = {k[0]: t for k, t in zip(keys, tables, strict=True)}
    row_table = {k: union_tables([per_slot[sl] for sl in k], disjoint=False) for k in needed}
    t_pass = time.perf_counter()
    n_out = offsets[-1]
    make_frames: Callable[[], tuple[DataFrame, DataFrame]] | None = None
    made: tuple[DataFrame, DataFrame] | None = None
    if path:
        staged = StagedOutput(path, tuple(offsets), tuple(user_names), True, schema)
        make_frames = partial(staged.frames, source)
    else:
        user_cols = [_quote(c) for c in user_names]
        with_id = marked.select(*user_cols, dense_id(offsets).alias(ROW_ID))
        made = (marked.select(*user_cols), with_id)
        cached.append(RowIds(with_id, n_out, marked))
    contributing: dict[str, LineageTable] = {}
    considered: dict[str, LineageTable] = {}
    out_shape = (n_out, len(columns))
    for i, inp in enumerate(inputs):
        if result._a2a:
            full = (
                full_table(out_shape, inp.shape)
                if i in result._sources
                else empty_table(out_shape, inp.shape)
            )
            contributing[inp.name] = considered[inp.name] = full
            continue
        for which, dest in (("contrib", contributing), ("consid", considered)):
            parts = []
            for key, jcs in plan[(inp.name, which)]:
                jc: npt.NDArray[np.int64] = np.asarray(sorted(jcs), np.int64).reshape(-1, 2)
                col_table = compress(
                    LineageRelation.from_columns(
                        (len(columns),), (len(inp.columns),), [jc[:, 0]], [jc[:, 1]]
                    ),
                    fallback="never",
                )
                parts.append((row_table[key], col_table))
            # kept factored: the product of a million-row table by a few column rows would
            # be formed, stored and queried as millions of rows per column row
            dest[inp.name] = factored_table(parts) if parts else empty_table(out_shape, inp.shape)
    column_lineage: dict[str, dict[str, list[str]]] = {}
    for j, p in enumerate(user_pos):
        lin = infos[p]
        assert isinstance(lin, ColumnLineage)
        deps: dict[str, set[str]] = {}
        for s, c in lin.contrib:
            inp = inputs[ctx.slot_input[s]]
            deps.setdefault(inp.name, set()).add(inp.columns[c])
        if result._a2a:
            deps = {inputs[i].name: set(inputs[i].columns) for i in result._sources}
        column_lineage[columns[j]] = {k: sorted(v) for k, v in deps.items()}
    t2 = time.perf_counter()
    return FrameCapture(
        columns=columns,
        n_rows=n_out,
        inputs=tuple(inputs),
        contributing=contributing,
        considered=considered,
        column_lineage=column_lineage,
        flagged=bool(ctx.flagged_ops),
        flagged_ops=tuple(ctx.flagged_ops),
        timings={
            "plan_s": t1 - t0,
            "pass_s": t_pass - t1,
            "write_s": t_write - t1,
            "lineage_s": t_lineage - t_write,
            "refetch_s": t_pass - t_lineage,
            **({"refetched_rows": float(sum(got.failed))} if any(got.failed) else {}),
            **({"tapped_rows": float(tapped)} if tapped else {}),
            "product_s": t2 - t_pass,
        },
        _cached=cached,
        _staged=staged,
        _frames=make_frames,
        _made=made,
    )


def _discard(path: str, source: Callable[[], Any] | None) -> None:
    """Drops a pass's output before the capture runs again."""
    if path:
        shutil.rmtree(path, ignore_errors=True)
        _STAGING.discard(path)
    elif source is not None:
        source().unpersist()


def _found_again(
    ctx: CaptureContext,
    got: RowTables,
    keys: Sequence[tuple[int, ...]],
    id_columns: list[str | RangeColumns],
    n_ins: list[int],
    offsets: list[int],
    tables: list[LineageTable],
    path: str,
    source: Callable[[], Any],
) -> int:
    """Adds to ``tables`` the ids of the groups whose range check failed: matched with the
    ids the tap recorded, or found by joining their keys with their input. Returns the rows
    the tap served.

    Raises:
        SummariesMissing: a slot with recorded summaries would need the join.
    """
    tapped = 0
    for g, n_failed in enumerate(got.failed):
        if not n_failed:
            continue
        # groups whose ids are not a range: match them with the ids the tap recorded, or
        # join their keys with their input
        src = ctx.range_src[keys[g][0]]
        extra = None
        if src.tap is not None and path:
            try:
                extra = tapped_ids(
                    src.tap,
                    path,
                    cast(RangeColumns, id_columns[g]),
                    n_ins[g],
                    offsets,
                    n_failed,
                    hashed=src.hashed,
                    rows=got.failed_rows[g] if got.failed_rows else None,
                )
                tapped += n_failed
            except TapFailed as e:
                log.info("The id tap of %s is not used (%s); joining instead.", src.slot, e)
        if extra is None:
            extra = refetch_ids(
                source(),
                cast(RangeColumns, id_columns[g]),
                src.frame,
                src.keys,
                src.slot,
                n_ins[g],
                offsets,
                n_failed,
            )
        tables[g] = union_tables([tables[g], extra])  # their rows interleave
    return tapped


class _Once:
    """A value made on its first call and kept (e.g. the staged output read back)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make: Callable[[], Any] | None = make
        self._value: Any = None

    def __call__(self) -> Any:
        if self._make is not None:
            self._value, self._make = self._make(), None
        return self._value


def _slot_kind(slot: int, arrays: frozenset[int], ranges: frozenset[int]) -> str:
    """How a slot holds its input row ids: a bigint column (``"scalar"``), the
    ``lo`` of a range slot (``"range"``, see :func:`_range_columns`), or an ``array<bigint>`` column
    (``"list"``)."""
    if slot in arrays:
        return "list"
    return "range" if slot in ranges else "scalar"


def _range_columns(ctx: CaptureContext, slot: int) -> RangeColumns:
    """The output columns of range slot ``slot``'s summary (see :class:`RangeFields`)."""
    f = ctx.range_fields[slot]

    def name(s: int | None) -> str | None:
        return None if s is None else slot_name(s)

    return RangeColumns(
        slot_name(slot),
        name(f.hi),
        name(f.ok),
        name(f.n),
        tuple(slot_name(k) for k in f.keys),
        name(f.hash),
        f.summary,
    )


def _slot_column(slot: str | RangeColumns, kind: str) -> Any:
    """The column of a slot's ids as :func:`~dslog_dagster.spark.lineage.row_tables` reads it
    (a missing list is an empty one; a range as ``struct<lo, hi, ok>``)."""
    if isinstance(slot, RangeColumns):
        assert slot.hi is not None
        assert slot.ok is not None
        return F.struct(
            F.col(_quote(slot.lo)).alias("lo"),
            F.col(_quote(slot.hi)).alias("hi"),
            F.col(_quote(slot.ok)).alias("ok"),
        )
    if kind == "list":
        return F.coalesce(F.col(_quote(slot)), F.array().cast("array<bigint>"))
    return F.col(_quote(slot))
