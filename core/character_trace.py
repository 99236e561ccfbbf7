"""Character-level queries across a store: which characters of which cells, many hops away.

A stored operation may carry character tables (:mod:`~dslog_dagster.core.store.char_tables`):
one ProvRC table per (output column, input column) between ``(row, character)`` spaces. A
character query starts from a character range of one cell of a string column and walks the
lineage graph like :func:`~dslog_dagster.core.trace.trace`:

* **backward**: to the array's producer, through its character tables for that column, to
  ranges of input cells, and on to the sources (arrays without a producer);
* **forward**: to every operation that read the array, through the character tables fed by
  that column, and on to the sinks.

Where a hop has no character table for the column (a UDF, an aggregate's value, a NumPy step,
an operation stored without character lineage) the hop falls back to the cell lineage: every
cell it reaches is taken whole (``start == 0``, ``stop is None``) and the answer says so
(:attr:`~dslog_dagster.core.characters.CharacterRange.whole`, and
:attr:`CharacterAnswer.fallbacks` names the operation, the column and why). A range reached
through a whole-cell hop stays marked whole on later hops, since it may hold characters the
exact answer would not.
"""

from dataclasses import dataclass, field

from dslog_dagster.core.characters import CharacterLineage, CharacterRange, trace_characters
from dslog_dagster.core.query import CellSet, query_path
from dslog_dagster.core.query.engine import Direction
from dslog_dagster.core.store import ArrayRecord, LineageStore, OperationRecord, read_characters
from dslog_dagster.core.trace import producer_of, readers_of
from dslog_dagster.errors import QueryError

__all__ = ["CharacterAnswer", "Fallback", "trace_character_range"]


@dataclass(frozen=True)
class Fallback:
    """A hop answered with whole cells: operation ``op_name`` has no character lineage for
    column ``column`` of ``array``, because ``reason``."""

    op_name: str
    array: str
    column: str
    reason: str


@dataclass
class CharacterAnswer:
    """The end of a character query.

    Attributes:
        ranges: character ranges of cells of the arrays where the walk ended (sources going
            backward, sinks going forward), sorted; ``CharacterRange.input`` names the array.
        fallbacks: the hops answered with whole cells (empty: exact at character level).
        hops: operations crossed.
    """

    ranges: list[CharacterRange] = field(default_factory=list)
    fallbacks: list[Fallback] = field(default_factory=list)
    hops: int = 0

    @property
    def exact(self) -> bool:
        """Every hop had character lineage."""
        return not self.fallbacks


# one item of the walk: array, row, column, start, stop (None: to the end), whole
_Item = tuple[ArrayRecord, int, str, int, int | None, bool]


def _column_index(a: ArrayRecord, column: str) -> int:
    names = a.column_names
    if names is None or column not in names:
        msg = (
            f"`{a.name}` has no column `{column}` (columns: {names}); a character query "
            "starts from a string column of a frame."
        )
        raise QueryError(msg)
    return names.index(column)


def trace_character_range(
    store: LineageStore,
    array: ArrayRecord,
    row: int,
    column: str,
    start: int = 0,
    stop: int | None = None,
    direction: Direction = "backward",
    max_hops: int = 64,
) -> CharacterAnswer:
    """Carry characters ``start:stop`` of cell ``(row, column)`` of ``array`` through the
    store (see the module docstring).

    Raises:
        QueryError: the column or the range is not in the array, or the walk went past
            ``max_hops`` operations (a cycle of versions cannot happen; a deeper graph asks
            for a higher limit).
    """
    if direction not in ("backward", "forward"):
        msg = f"Direction must be 'backward' or 'forward', not {direction!r}."
        raise QueryError(msg)
    _column_index(array, column)
    answer = CharacterAnswer()
    chars: dict[tuple[str, str], CharacterLineage] = {}
    work: list[tuple[_Item, int]] = [((array, row, column, start, stop, False), 0)]
    seen: set[tuple[str, int, str, int, int | None, bool]] = set()
    ends: set[CharacterRange] = set()
    while work:
        item, depth = work.pop()
        a, r, col, s, e, whole = item
        key = (a.array_id, r, col, s, e, whole)
        if key in seen:
            continue
        seen.add(key)
        ops = [producer_of(store, a)] if direction == "backward" else readers_of(store, a)
        ops_ = [op for op in ops if op is not None]
        if not ops_:
            ends.add(CharacterRange(a.name, col, r, s, e, whole))
            continue
        if depth >= max_hops:
            msg = f"The character query crossed {max_hops} operations; raise `max_hops`."
            raise QueryError(msg)
        answer.hops = max(answer.hops, depth + 1)
        for op in ops_:
            for nxt in _hop(store, op, item, direction, chars, answer):
                work.append((nxt, depth + 1))
    answer.ranges = sorted(ends, key=lambda x: (x.input, x.column, x.row, x.start, x.whole))
    return answer


def _lineage(
    store: LineageStore,
    op: OperationRecord,
    output: str,
    chars: dict[tuple[str, str], CharacterLineage],
) -> CharacterLineage:
    key = (op.op_id, output)
    if key not in chars:
        chars[key] = read_characters(store, op, output)
    return chars[key]


def _hop(
    store: LineageStore,
    op: OperationRecord,
    item: _Item,
    direction: Direction,
    chars: dict[tuple[str, str], CharacterLineage],
    answer: CharacterAnswer,
) -> list[_Item]:
    """The items one operation carries ``item`` to."""
    a, r, col, s, e, whole = item
    back = direction == "backward"
    out: list[_Item] = []
    if back:
        lin = _lineage(store, op, a.name, chars)
        tables = [t for t in lin.tables if t.column == col]
        by_name = {x.name: x for x in op.inputs}
        for t in tables:
            for g in trace_characters(t.table, t.input, t.input_column, r, s, e):
                out.append((by_name[t.input], g.row, g.column, g.start, g.stop, whole))
        if tables:
            return out
        reason = lin.whole_cell.get(col, "the operation has no character lineage for it")
    else:
        reached = False
        for o in op.outputs:
            lin = _lineage(store, op, o.name, chars)
            for t in lin.tables:
                if t.input == a.name and t.input_column == col:
                    reached = True
                    for g in trace_characters(t.table, o.name, t.column, r, s, e, "forward"):
                        out.append((o, g.row, g.column, g.start, g.stop, whole))
        if reached:
            return out
        reason = "the operation has no character lineage from it"
    answer.fallbacks.append(Fallback(op.op_name, a.name, col, reason))
    return out + _whole_cells(store, op, a, r, col, direction)


def _whole_cells(
    store: LineageStore, op: OperationRecord, a: ArrayRecord, r: int, col: str, direction: Direction
) -> list[_Item]:
    """Cell ``(r, col)`` of ``a`` carried through ``op``'s cell lineage: every cell reached,
    whole."""
    c = _column_index(a, col)
    out: list[_Item] = []
    back = direction == "backward"
    for t in op.tables:
        here, there = (t.output, t.input) if back else (t.input, t.output)
        if here != a.name:
            continue
        other = next(x for x in (op.inputs if back else op.outputs) if x.name == there)
        table = store.read_lineage(op, t.output, t.input)
        cells = CellSet.from_indices(a.shape, [[r, c]])
        reached = query_path([(table, direction)], cells).to_indices()
        names = other.column_names
        for rr, cc in reached.tolist():
            name = names[cc] if names is not None else str(cc)
            out.append((other, int(rr), name, 0, None, True))
    return out
