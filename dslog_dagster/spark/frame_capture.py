"""What :func:`~dslog_dagster.spark.capture.capture_frames` returns: the output and its lineage.

A :class:`FrameCapture` holds, per input (:class:`FrameInput`), the output's cell lineage as
ProvRC tables (contributing and considered), the column lineage and the pass's timings; it
gives the output's rows as the pass computed them (staged files or cached rows), registers
the capture as one operation in a lineage store, and releases what the pass kept.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame

from dslog_dagster.core.api import DSLog
from dslog_dagster.core.characters import CharacterLineage, CharacterRange, trace_cell
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store.effects import OperationEffects
from dslog_dagster.errors import InvalidRelationError
from dslog_dagster.spark.rowid import RowIds
from dslog_dagster.spark.staging import CollectedOutput, StagedOutput, remove_staging_dir

if TYPE_CHECKING:
    from dslog_dagster.core.store import LineageStore

__all__ = ["FrameCapture", "FrameInput", "KeptRows"]


@dataclass
class KeptRows:
    """The input rows one capture run kept (their ids must stay stable), shared by the
    captures of every output of that run and released with the last of them."""

    rows: list[RowIds]
    holders: int = 1

    def release(self) -> None:
        """One holder is done; the last one drops the kept rows."""
        self.holders -= 1
        if self.holders <= 0:
            for r in self.rows:
                r.release()
            self.rows.clear()


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
        columns: the output's lineage columns; ``shape == (n_rows, len(columns))``. A struct
            column's leaf fields are columns of their own, named by their path (``s.a``; see
            :mod:`~dslog_dagster.spark.fields`).
        schema: ``(lineage column, type)``, as the store records the output's schema.
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
        characters: the character-range lineage of the output's string columns
            (``capture_frames(..., characters=True)``; else ``None``), see
            :mod:`dslog_dagster.core.characters`; query it with :meth:`trace_characters`.
        row_tables: the row table (output rows ← input rows) of each contributing
            ``(input name, output column index, input column index)`` pair.
        effects: the DPDS kinds and column effects of the calls the capture ran
            (:mod:`~dslog_dagster.spark.kinds`), stored with the operation.
    """

    columns: tuple[str, ...]
    n_rows: int
    inputs: tuple[FrameInput, ...]
    contributing: dict[str, LineageTable]
    considered: dict[str, LineageTable]
    column_lineage: dict[str, dict[str, list[str]]]
    schema: tuple[tuple[str, str], ...] = ()
    flagged: bool = False
    flagged_ops: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    characters: CharacterLineage | None = None
    effects: OperationEffects | None = None
    row_tables: dict[tuple[str, int, int], LineageTable] = field(default_factory=dict, repr=False)
    _cached: list[RowIds | KeptRows] = field(default_factory=list, repr=False)
    _staged: StagedOutput | None = field(default=None, repr=False)
    _collected: CollectedOutput | None = field(default=None, repr=False)
    _frames: Callable[[], tuple[DataFrame, DataFrame]] | None = field(default=None, repr=False)
    _made: tuple[DataFrame, DataFrame] | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, len(self.columns))

    @property
    def staged(self) -> StagedOutput | None:
        """The output's staged Parquet files, or ``None`` (cached rows, or released).

        ``write_frame`` links these files into the stored frame instead of writing the rows
        a second time.
        """
        return self._staged

    def local_rows(self, columns: Sequence[str]) -> pa.Table | None:
        """``columns`` of every output row and its ``ROW_ID``, read by this process without a
        Spark job or a frame to analyse: from the files the pass staged, or the rows it
        collected (``collect=True``). ``None`` when neither is here (rows marked and cached
        on a cluster without a shared folder, or the capture released)."""
        if self._collected is not None:
            return self._collected.read_local(columns)
        if self._staged is not None:
            return self._staged.read_local(columns)
        return None

    def visible(self) -> list[tuple[str, str]] | None:
        """The output's columns and their Spark types (``simpleString``) from the schema the
        pass recorded, without its frame; ``None`` when it recorded none."""
        if self._collected is not None:
            return self._collected.visible()
        return None if self._staged is None else self._staged.visible()

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

    def trace_characters(
        self, column: str, row: int, start: int = 0, stop: int | None = None
    ) -> list[CharacterRange]:
        """Which characters of which input cells output characters ``start:stop`` (default:
        all) of cell ``(row, column)`` come from.

        Columns without character lineage (see ``characters.whole_cell``) fall back to the
        whole input cells of the cell lineage (``CharacterRange.whole``).

        Raises:
            InvalidRelationError: the capture was made without ``characters=True``, or
                ``column`` is not an output column.
        """
        cols = {i.name: i.columns for i in self.inputs}
        return trace_cell(
            self.characters, column, self.columns, row, start, stop, self.shape,
            self.contributing, cols,
        )  # fmt: skip

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

        The output array is registered with its schema, and a capture made with
        ``characters=True`` stores its character tables with the operation (query them with
        :func:`~dslog_dagster.core.character_trace.trace_character_range`).
        """
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
        schema = list(self.schema) or [(c, str(t)) for c, t in self.frame.dtypes]
        out = store.register_array(output, self.shape, "float64", version=version, columns=schema)
        tables = self.considered if considered else self.contributing
        lineage = {(output, names[k]): t for k, t in tables.items()}
        chars = None
        if self.characters is not None and not considered:  # characters are contributing
            renamed = tuple(replace(t, input=names[t.input]) for t in self.characters.tables)
            chars = {output: replace(self.characters, tables=renamed)}
        op = store.register_operation(
            op_name,
            in_recs,
            [out],
            lineage,
            args={**(args or {}), "considered": considered, "flagged": self.flagged},
            capture_method="spark-all-to-all" if self.flagged else "spark",
            timings=self.timings,
            characters=chars,
            effects=self.effects,
        )
        return op

    def share_inputs(self, kept: KeptRows) -> None:
        """Hold the inputs' kept rows with the other outputs of the same run (released with
        the last of them)."""
        self._cached.insert(0, kept)

    def release(self) -> None:
        """Drop the cached rows of the inputs (ids assigned here) and of the output, and the
        output's staging files (stored copies made by ``write_frame`` stay)."""
        for c in self._cached:
            c.release()
        self._cached.clear()
        if self._staged is not None and self._staged.owned:
            remove_staging_dir(self._staged.path)
            self._staged = None
            self._frames = None
            self._made = None
        if self._collected is not None:  # its rows go with it, as staged files do
            self._collected = None
            self._frames = None
            self._made = None
