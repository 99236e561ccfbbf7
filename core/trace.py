"""Carry cells through the whole lineage graph around an array version, either way.

A path query (:meth:`~dslog_dagster.core.api.DSLog.prov_query`) follows arrays the user
names. The provenance questions of DPDS and PROVision (why is this cell here, how was it made,
how far does this input spread, what changed) ask instead for *every* array upstream or
downstream of a selection. :func:`trace` answers that in one walk:

* **backward**: from an array version to the operation that produced it (its most recent
  producer), to that operation's inputs at the versions it read, and so on to the sources;
* **forward**: from an array version to every operation that read it, to their outputs, and
  so on to the sinks.

Cells accumulate per array version (the union over all paths) and only newly reached cells are
carried on, so a DAG with shared ancestors is walked once per new cell set, and the walk ends
on any graph. Each operation crossed is recorded with the cells it carried (:class:`Crossing`),
which is what "how" questions list. The catalog is asked once per wave of newly reached array
versions, not once per array.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from dslog_dagster.core.on_demand import DEFERRED, deferred_error
from dslog_dagster.core.query import CellSet, PreparedHop, prepare, run_hops
from dslog_dagster.core.store import ArrayRecord, LineageStore, OperationRecord

__all__ = ["Crossing", "Trace", "TraceDirection", "producer_of", "readers_of", "trace"]

TraceDirection = Literal["backward", "forward"]


@dataclass(frozen=True, slots=True)
class Crossing:
    """An operation a trace crossed: from cells of ``source`` to cells of ``target``."""

    operation: OperationRecord
    source: ArrayRecord
    target: ArrayRecord
    carried: CellSet  # cells of ``source`` handed to the operation (the union over the walk)
    reached: CellSet  # cells of ``target`` they reached


@dataclass
class Trace:
    """Where a selection of cells reaches, per array version.

    Attributes:
        direction: ``backward`` (towards sources) or ``forward`` (towards sinks).
        start: the array version the selection is on.
        cells: array_id -> the cells reached (the start's own selection included).
        records: array_id -> its record.
        hops: array_id -> the fewest operations between it and the start.
        producers: array_id -> the operation that produced it (backward walks; ``None``: a
            source, nothing in the store wrote it).
        crossings: every (operation, source array, target array) crossed, with the cells.
    """

    direction: TraceDirection
    start: ArrayRecord
    cells: dict[str, CellSet] = field(default_factory=dict)
    records: dict[str, ArrayRecord] = field(default_factory=dict)
    hops: dict[str, int] = field(default_factory=dict)
    producers: dict[str, OperationRecord | None] = field(default_factory=dict)
    crossings: dict[tuple[str, str, str], Crossing] = field(default_factory=dict)

    def arrays(self) -> list[ArrayRecord]:
        """Every array version reached (with cells), nearest first."""
        ids = [a for a, c in self.cells.items() if not c.is_empty()]
        return [self.records[a] for a in sorted(ids, key=lambda a: (self.hops[a], a))]

    def by_name(self) -> dict[str, str]:
        """Array name -> array_id (the nearest version when a walk reached several)."""
        out: dict[str, str] = {}
        for aid in sorted(self.records, key=lambda a: -self.hops[a]):
            out[self.records[aid].name] = aid
        return out


def _edges(store: LineageStore, ids: Iterable[str], role: str) -> dict[str, list[OperationRecord]]:
    """Operations that have each of ``ids`` in ``role`` (``output``: its producers, newest
    first; ``input``: its readers, oldest first), in one catalog read."""
    wanted = sorted(set(ids))
    out: dict[str, list[OperationRecord]] = {a: [] for a in wanted}
    if not wanted:
        return out
    order = "DESC" if role == "output" else "ASC"
    rows = store.catalog.rows(
        "SELECT DISTINCT array_id, op_id FROM operation_arrays "
        f"WHERE role = ? AND list_contains(?, array_id) ORDER BY op_id {order}",
        [role, wanted],
    )
    ops: dict[str, OperationRecord] = {}
    for array_id, op_id in rows:
        if op_id not in ops:
            ops[op_id] = store.get_operation(str(op_id))
        out[str(array_id)].append(ops[op_id])
    return out


def producer_of(store: LineageStore, array: ArrayRecord) -> OperationRecord | None:
    """The operation that produced ``array`` (its most recent producer; ``None``: a source)."""
    ops = _edges(store, [array.array_id], "output")[array.array_id]
    return ops[0] if ops else None


def readers_of(store: LineageStore, array: ArrayRecord) -> list[OperationRecord]:
    """The operations that read ``array`` (oldest first)."""
    return _edges(store, [array.array_id], "input")[array.array_id]


def trace(
    store: LineageStore, start: ArrayRecord, cells: CellSet, direction: TraceDirection
) -> Trace:
    """Carry ``cells`` of ``start`` through every operation upstream (``backward``: the most
    recent producer of each array version) or downstream (``forward``: every reader)."""
    tr = Trace(direction, start)
    tr.cells[start.array_id] = cells
    tr.records[start.array_id] = start
    tr.hops[start.array_id] = 0
    prepared: dict[tuple[str, str, str], PreparedHop] = {}
    known: dict[str, list[OperationRecord]] = {}
    role = "output" if direction == "backward" else "input"
    work: list[tuple[str, CellSet]] = [(start.array_id, cells)]
    while work:
        missing = {aid for aid, _ in work if aid not in known}
        if missing:
            known.update(_edges(store, missing, role))
        aid, new = work.pop()
        rec = tr.records[aid]
        ops = known[aid]
        back = direction == "backward"
        if back:
            ops = ops[:1]  # the most recent producer wrote this version
            tr.producers.setdefault(aid, ops[0] if ops else None)
        if new.is_empty():
            continue
        ops = _without_deferred(ops)
        for op in ops:
            for t in op.tables:
                here, there = (t.output, t.input) if back else (t.input, t.output)
                if here != rec.name:
                    continue
                side = op.inputs if back else op.outputs
                other = next(a for a in side if a.name == there)
                key = (op.op_id, t.output, t.input)
                hop = prepared.get(key)
                if hop is None:
                    hop = prepared[key] = prepare(store.read_lineage(op, t.output, t.input))
                reached = run_hops([(hop, direction)], new)
                _cross(tr, op, rec, other, new, reached)
                tr.records.setdefault(other.array_id, other)
                depth = tr.hops[aid] + 1
                tr.hops[other.array_id] = min(tr.hops.get(other.array_id, depth), depth)
                before = tr.cells.get(other.array_id)
                if before is None:
                    tr.cells[other.array_id] = reached
                    grown = reached
                else:
                    union = before | reached
                    if union == before:
                        continue
                    tr.cells[other.array_id] = union
                    grown = CellSet.from_mask(union.to_mask() & ~before.to_mask(), union.shape)
                work.append((other.array_id, grown))
    return tr


def _without_deferred(ops: list[OperationRecord]) -> list[OperationRecord]:
    """``ops`` without the on-demand operations that were reconstructed (their
    reconstructions are in ``ops`` too); one that was not makes the walk refuse.

    Raises:
        DeferredLineageError: an operation ran on demand and has no reconstruction.
    """
    rebuilt = {op.args.get("reconstructs") for op in ops}
    out = []
    for op in ops:
        if op.capture_method == DEFERRED:
            if op.op_id not in rebuilt:
                raise deferred_error(op)
            continue
        out.append(op)
    return out


def _cross(
    tr: Trace,
    op: OperationRecord,
    source: ArrayRecord,
    target: ArrayRecord,
    carried: CellSet,
    reached: CellSet,
) -> None:
    key = (op.op_id, source.array_id, target.array_id)
    seen = tr.crossings.get(key)
    if seen is not None:
        carried, reached = seen.carried | carried, seen.reached | reached
    tr.crossings[key] = Crossing(op, source, target, carried, reached)
