"""Capture of a function over pandas DataFrames: the output and its cell lineage.

:func:`capture_pandas` hands the function one
:class:`~dslog_dagster.pandas.frame.TrackedDataFrame` per input, runs it once, and turns the
lineage state of what it returned into ProvRC tables of shape ``(rows, columns) ← (input rows,
input columns)`` — the same cell space as Spark frames, so the store, the queries and reuse
need nothing new. As in the Spark capture (:mod:`dslog_dagster.spark.cell_lineage`), each
table is kept factored: per set of slots, their row map (compressed once) × the column pairs
it carries (:func:`~dslog_dagster.core.combine.factored_table`).

``dslog_dagster.core.capture.capture`` dispatches here when an input is a pandas frame
(without importing pandas in the core).
"""

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xxhash

from dslog_dagster.core.characters import CharacterLineage, CharacterRange, trace_cell
from dslog_dagster.core.combine import factored_table
from dslog_dagster.core.compression import column_table, compress
from dslog_dagster.core.constant_tables import empty_table, flagged_table
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store.effects import OperationEffects
from dslog_dagster.errors import InvalidRelationError, UnsupportedArrayError
from dslog_dagster.pandas import (  # noqa: F401  (they register their rules)
    aggregate,
    combine,
    kinds,
    pivot,
    reshape,
    sequence,
    strings,
    window,
)
from dslog_dagster.pandas.arrays import end_bridge
from dslog_dagster.pandas.char_segments import Segments, character_lineage, input_chars, is_text
from dslog_dagster.pandas.dispatch import install
from dslog_dagster.pandas.frame import TrackedDataFrame, check_labels
from dslog_dagster.pandas.series import TrackedSeries
from dslog_dagster.pandas.state import FrameInput, FrameState, PandasContext

if TYPE_CHECKING:
    from dslog_dagster.core.capture import CaptureResult, Mode
    from dslog_dagster.core.store import LineageStore
    from dslog_dagster.core.store.records import ArrayRecord
    from dslog_dagster.pandas.rows import RowMap

__all__ = ["PandasCapture", "capture_pandas", "frame_input", "schema_of"]


def schema_of(df: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    """``(column name, dtype)`` per column, as the store records a frame's schema."""
    return tuple((str(c), str(t)) for c, t in df.dtypes.items())


def frame_input(name: str, df: pd.DataFrame) -> FrameInput:
    """The capture's description of input frame ``df``."""
    check_labels(df, "capture")
    schema = schema_of(df)
    return FrameInput(name, tuple(n for n, _ in schema), tuple(t for _, t in schema), len(df))


@dataclass
class PandasCapture:
    """What :func:`capture_pandas` returns for one output frame.

    Attributes:
        frame: the output, exactly as plain pandas computes it.
        inputs: the inputs (names ``input0``... unless named).
        contributing / considered: ``{input name: LineageTable}`` of shape
            ``(rows, columns) ← input shape``; considered ⊇ contributing.
        column_lineage: ``{output column: {input name: [input columns]}}`` (contributing).
        flagged_ops: operations recorded all-to-all within their row (row-wise ``apply``).
        seconds: the capture's time (user code and lineage).
        characters: the character-range lineage of the output's string columns
            (``capture_pandas(..., characters=True)``; else ``None``), see
            :mod:`dslog_dagster.core.characters`; query it with :meth:`trace_characters`.
        effects: the DPDS kinds and column effects of the pandas calls the capture ran
            (:mod:`~dslog_dagster.pandas.kinds`), stored with the operation.
    """

    frame: pd.DataFrame
    inputs: tuple[FrameInput, ...]
    contributing: dict[str, LineageTable]
    considered: dict[str, LineageTable]
    column_lineage: dict[str, dict[str, list[str]]]
    flagged_ops: tuple[str, ...] = ()
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    characters: CharacterLineage | None = None
    effects: OperationEffects | None = None

    @property
    def flagged(self) -> bool:
        return bool(self.flagged_ops)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.frame.shape[0]), int(self.frame.shape[1]))

    @property
    def schema(self) -> tuple[tuple[str, str], ...]:
        return schema_of(self.frame)

    def _name(self, input: int | str) -> str:
        if isinstance(input, int):
            return self.inputs[input].name
        if input not in self.contributing:
            msg = f"No input `{input}`; the inputs are {[i.name for i in self.inputs]}."
            raise InvalidRelationError(msg)
        return input

    def table(self, input: int | str = 0, *, considered: bool = False) -> LineageTable:
        """The ProvRC table of ``output ← input`` (index or name)."""
        return (self.considered if considered else self.contributing)[self._name(input)]

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
        names = [str(c) for c in self.frame.columns]
        cols = {i.name: i.columns for i in self.inputs}
        return trace_cell(
            self.characters, column, names, row, start, stop, self.shape,
            self.contributing, cols,
        )  # fmt: skip

    def register(
        self,
        store: "LineageStore",
        output: str,
        inputs: Mapping[str, str] | Sequence[str] | None = None,
        *,
        op_name: str = "pandas",
        considered: bool = False,
        version: str | None = None,
    ) -> Any:
        """Register the capture as one operation in ``store``, the frames with their schema.

        Input arrays not registered yet are registered with their shapes and schemas. A
        capture made with ``characters=True`` stores its character tables with the operation
        (query them with :func:`~dslog_dagster.core.character_trace.trace_character_range` or
        ``dslog query --chars``), as the Spark capture does; they are contributing lineage, so
        ``considered=True`` stores the cells only.
        """
        from dslog_dagster.core.store.records import NewArray

        if inputs is None:
            names = {i.name: i.name for i in self.inputs}
        elif isinstance(inputs, Mapping):
            names = {i.name: inputs[i.name] for i in self.inputs}
        else:
            names = {i.name: n for i, n in zip(self.inputs, inputs, strict=True)}
        in_recs: list[ArrayRecord] = []
        for inp in self.inputs:
            try:
                rec = store.get_array(names[inp.name])
            except KeyError:
                rec = store.register_array(
                    names[inp.name], inp.shape, "float64",
                    columns=tuple(zip(inp.columns, inp.dtypes, strict=True)),
                )  # fmt: skip
            if rec.shape != inp.shape:
                msg = (
                    f"Input array `{rec.name}` is registered with shape {rec.shape}, but the "
                    f"captured frame has shape {inp.shape}."
                )
                raise InvalidRelationError(msg)
            in_recs.append(rec)
        out = NewArray(output, self.shape, "float64", version=version, columns=self.schema)
        tables = self.considered if considered else self.contributing
        lineage = {(output, names[k]): t for k, t in tables.items()}
        chars = None
        if self.characters is not None and not considered:  # characters are contributing
            renamed = tuple(replace(t, input=names[t.input]) for t in self.characters.tables)
            chars = {output: replace(self.characters, tables=renamed)}
        return store.register_operation(
            op_name, in_recs, [out], lineage,
            args={"considered": considered, "flagged": self.flagged},
            capture_method="pandas-flagged" if self.flagged else "pandas",
            timings={"capture_s": self.seconds},
            characters=chars,
            effects=self.effects,
        )  # fmt: skip


def _output_frame(value: Any) -> TrackedDataFrame:
    if isinstance(value, TrackedSeries):
        value = value.to_frame()
    if not isinstance(value, TrackedDataFrame):
        msg = (
            f"The captured function returned a `{type(value).__name__}`; a pandas capture "
            "returns tracked frames (or series) made from its inputs."
        )
        if isinstance(value, np.ndarray):
            msg += (
                " Put a NumPy result back as a column (`frame.assign(name=array)`), or make "
                "the NumPy part a step of its own."
            )
        raise UnsupportedArrayError(msg)
    return value


def _tables(
    state: FrameState, inputs: Sequence[FrameInput]
) -> tuple[dict[str, LineageTable], dict[str, LineageTable]]:
    """The contributing and considered tables of every input (factored)."""
    ctx = state.ctx
    n_cols = len(state.columns)
    out_shape = (state.n_rows, n_cols)
    contributing: dict[str, LineageTable] = {}
    considered: dict[str, LineageTable] = {}
    row_tables: dict[frozenset[int], tuple[bytes, LineageTable]] = {}
    compressed: dict[bytes, LineageTable] = {}  # by row map content
    for i, inp in enumerate(inputs):
        if state.all_to_all:
            t = flagged_table(out_shape, inp.shape, source=i in state.sources)
            contributing[inp.name] = considered[inp.name] = t
            continue
        for which, dest in (("contrib", contributing), ("consid", considered)):
            by_cell: dict[tuple[int, int], set[int]] = {}
            for j, col in enumerate(state.columns):
                pairs = col.contrib if which == "contrib" else col.full() | state.row_consid
                for s, c in pairs:
                    if ctx.slots[s][0] == i:
                        by_cell.setdefault((j, c), set()).add(s)
            by_slots: dict[frozenset[int], list[tuple[int, int]]] = {}
            for cell, ss in by_cell.items():
                by_slots.setdefault(frozenset(ss), []).append(cell)
            # one part per distinct row map: the columns of one input usually travel together
            # (a merge or a filter moves all of them), so slot sets that differ often hold the
            # same rows; their cells share one row table instead of one copy each
            parts: dict[bytes, tuple[LineageTable, list[tuple[int, int]]]] = {}
            for key, cells in sorted(by_slots.items(), key=lambda kv: sorted(kv[0])):
                if key not in row_tables:
                    rows: RowMap | None = None
                    seen: set[int] = set()
                    for s in sorted(key):
                        m = ctx.slots[s][1]
                        if id(m) in seen:  # slots often share one map object
                            continue
                        seen.add(id(m))
                        rows = m if rows is None else rows.union(m)
                    assert rows is not None
                    digest = _row_digest(rows)
                    if digest not in compressed:
                        # ProvRC, or the columnar encoding where it is smaller (rows drawn at
                        # random: a join or group-by on shuffled keys), as Spark's capture does
                        compressed[digest] = compress(
                            LineageRelation.from_columns(
                                (state.n_rows,), (inp.n_rows,), [rows.out], [rows.src]
                            )
                        )
                    row_tables[key] = (digest, compressed[digest])
                digest, table = row_tables[key]
                parts.setdefault(digest, (table, []))[1].extend(cells)
            factors = [
                (table, column_table(sorted(cells), n_cols, len(inp.columns)))
                for table, cells in parts.values()
            ]
            dest[inp.name] = (
                factored_table(factors) if factors else empty_table(out_shape, inp.shape)
            )
    return contributing, considered


def _row_digest(rows: "RowMap") -> bytes:
    """A digest of a row map's pairs (equal maps, equal digests; XXH3-128 runs at memory
    speed, BLAKE2b took a second per million-row frame)."""
    h = xxhash.xxh3_128()
    h.update(np.array([rows.n_out, rows.n_src, rows.out.size], dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(rows.out).data)
    h.update(np.ascontiguousarray(rows.src).data)
    return h.digest()


def _column_lineage(
    state: FrameState, inputs: Sequence[FrameInput], columns: Sequence[Any]
) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for j, col in enumerate(state.columns):
        deps: dict[str, set[str]] = {}
        for s, c in col.contrib:
            inp = inputs[state.ctx.slots[s][0]]
            deps.setdefault(inp.name, set()).add(inp.columns[c])
        out[str(columns[j])] = {k: sorted(v) for k, v in sorted(deps.items())}
    return out


def capture_pandas(
    func: Callable[..., Any],
    frames: Mapping[str, pd.DataFrame] | Sequence[pd.DataFrame],
    *,
    call: Callable[[list[TrackedDataFrame]], Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    characters: bool = False,
) -> list[PandasCapture]:
    """Run ``func`` once on tracked copies of ``frames``; one :class:`PandasCapture` per
    output frame (a function returning a tuple or list has several).

    Args:
        func: called as ``func(*tracked, **kwargs)`` (or through ``call``).
        frames: the inputs, by name or in order (named ``input0``...).
        call: how to call ``func`` with the tracked frames (the Dagster step passes them by
            input name).
        characters: also record the character-range lineage of the output's string columns
            through pandas' string methods (:attr:`PandasCapture.characters`,
            :mod:`~dslog_dagster.pandas.strings`), as Spark's ``capture_frames(...,
            characters=True)``.

    Raises:
        UnsupportedFrameOperationError: the function used an operation without a rule.
        UnsupportedArrayError: an input is not a DataFrame, or the function returned
            something other than tracked frames.
    """
    install()
    kinds.install()
    t0 = time.perf_counter()
    named = (
        dict(frames)
        if isinstance(frames, Mapping)
        else {f"input{k}": f for k, f in enumerate(frames)}
    )
    for n, f in named.items():
        if not isinstance(f, pd.DataFrame):
            msg = f"Input `{n}` is a `{type(f).__name__}`; a pandas capture takes DataFrames."
            raise UnsupportedArrayError(msg)
    inputs = tuple(frame_input(n, f) for n, f in named.items())
    ctx = PandasContext(inputs, segments=Segments() if characters else None)
    tracked = [_tracked_input(ctx, k, f) for k, f in enumerate(named.values())]
    try:
        result = call(tracked) if call is not None else func(*tracked, **(kwargs or {}))
    finally:  # the NumPy annotation run of to_numpy(), if any: its arrays are spent
        end_bridge(ctx)
    values = list(result) if isinstance(result, tuple | list) else [result]
    t_run = time.perf_counter() - t0
    captures = []
    for v in values:
        out = _output_frame(v)
        st = out.lineage_state
        contributing, considered = _tables(st, inputs)
        captures.append(
            PandasCapture(
                out.plain,
                inputs,
                contributing,
                considered,
                _column_lineage(st, inputs, list(out.plain.columns)),
                tuple(ctx.flagged_ops),
                time.perf_counter() - t0,
                {"run": t_run},
                _characters(st, inputs, out.plain, named) if characters else None,
                kinds.effects_of(ctx),
            )
        )
    return captures


def _tracked_input(ctx: PandasContext, k: int, df: pd.DataFrame) -> TrackedDataFrame:
    """Input ``k`` tracked; with characters, each string column's characters are its own."""
    st = FrameState.of_input(ctx, k)
    if ctx.segments is not None:
        cols = [
            replace(c, chars=input_chars(ctx.segments, ctx.slots, k, j, df.iloc[:, j]))
            for j, c in enumerate(st.columns)
        ]
        st = st.with_columns(cols)
    return TrackedDataFrame(df, st)


def _characters(
    st: FrameState,
    inputs: Sequence[FrameInput],
    out: pd.DataFrame,
    named: Mapping[str, pd.DataFrame],
) -> CharacterLineage:
    """The character tables of output ``out`` (lineage state ``st``)."""
    assert st.ctx.segments is not None
    if st.all_to_all:
        whole = {str(c): "the step was recorded all-to-all (flagged)" for c in out.columns}
        return CharacterLineage((), whole, {})
    frames = list(named.values())
    values = {
        (i, j): frames[i].iloc[:, j]
        for i in range(len(frames))
        for j in range(frames[i].shape[1])
        if is_text(frames[i].iloc[:, j])
    }
    columns = []
    for j, col in enumerate(st.columns):
        contrib = {(st.ctx.slots[s][0], c) for s, c in col.contrib}
        columns.append((str(out.columns[j]), col.chars, contrib))
    return character_lineage(
        st.ctx.slots, st.ctx.segments, columns, [out.iloc[:, j] for j in range(out.shape[1])],
        [i.name for i in inputs], [i.columns for i in inputs], values,
    )  # fmt: skip


class _Relations(Mapping[tuple[int, int], LineageRelation]):
    """``(output, input) -> LineageRelation`` decompressed when read."""

    def __init__(self, caps: Sequence[PandasCapture], considered: bool) -> None:
        self._caps, self._considered = caps, considered

    def __getitem__(self, key: tuple[int, int]) -> LineageRelation:
        return self._caps[key[0]].relation(key[1], considered=self._considered)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter((o, i) for o, c in enumerate(self._caps) for i in range(len(c.inputs)))

    def __len__(self) -> int:
        return sum(len(c.inputs) for c in self._caps)


def as_capture_result(
    func: Callable[..., Any], frames: Sequence[Any], mode: "Mode", kwargs: Mapping[str, Any]
) -> "CaptureResult":
    """:func:`dslog_dagster.core.capture.capture` of a function over DataFrames: a
    ``CaptureResult`` whose ``value`` is the output frame (or tuple of frames) and whose
    relations name cells ``(row, column)``."""
    from dslog_dagster.core.capture import CaptureResult

    caps = capture_pandas(func, list(frames), kwargs=kwargs)
    single = len(caps) == 1
    value = caps[0].frame if single else tuple(c.frame for c in caps)
    considered = mode == "considered"
    flagged = any(c.flagged for c in caps)
    reason = None
    if flagged:
        ops = ", ".join(caps[0].flagged_ops)
        reason = f"No cell-level rule for {ops}: all-to-all within the row."
    keys = [(o, i) for o, c in enumerate(caps) for i in range(len(c.inputs))]
    return CaptureResult(
        value=value,
        outputs=tuple(np.asarray(c.frame.to_numpy()) for c in caps),
        input_shapes=tuple(i.shape for i in caps[0].inputs),
        relations=_Relations(caps, False),
        considered=_Relations(caps, True) if considered else None,
        mode=mode,
        flagged=flagged,
        reason=reason,
        tables={(o, i): caps[o].table(i) for o, i in keys},
        considered_tables=(
            {(o, i): caps[o].table(i, considered=True) for o, i in keys} if considered else None
        ),
    )
