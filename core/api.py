"""The DSLog API (ICDE sec. III-A) with Pythonic names, usable without Dagster.

* :class:`Array` — a tracked array: a name and a shape (plus optional version/dtype).
* :class:`Lineage` — the lineage between an output and an input array from any capture
  method: a relation, a per-cell callable, all-to-all box pairs, or a pair matrix.
* :meth:`DSLog.register_operation` — one execution of an operation and its lineage.
* :meth:`DSLog.prov_query` — cells of the first array of a path carried to the last array,
  hop by hop, forward (input → output) or backward (output → input) through any input of
  any operation; :meth:`DSLog.lineage_between` — the union over every path between two arrays.

A :class:`DSLog` session wraps a :class:`~dslog_dagster.core.store.LineageStore`. The
module-level :func:`register_operation`, :func:`prov_query` and :func:`lineage_between` use a
default session on ``$DSLOG_STORE`` (or ``./.dslog``), like the paper's global API.

**Versions.** Arrays are nodes per ``(name, version)``. A path given by names follows the most
recent chain of operations whose versions connect (an operation that read ``y`` version 1 does
not continue a path that reached ``y`` version 2); pin a version with an :class:`Array` or
:class:`~dslog_dagster.core.store.ArrayRecord` in the path.
"""

import itertools
import os
import reprlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from dslog_dagster.core.compression import compress
from dslog_dagster.core.declared import from_box_pairs, from_callable
from dslog_dagster.core.on_demand import DEFERRED, deferred_error
from dslog_dagster.core.op_kinds import array_effects
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.query import CellSet, Direction, PreparedHop, as_cells, prepare, run_hops
from dslog_dagster.core.relation import LineageRelation, Shape, as_shape
from dslog_dagster.core.store import ArrayRecord, LineageStore, OperationRecord
from dslog_dagster.core.store.graph import (
    Edge,
    GraphPiece,
    Node,
    array_of,
    load_records,
    path_piece,
    reachable_piece,
)
from dslog_dagster.core.store.records import check_name, dtype_name
from dslog_dagster.errors import (
    InvalidRelationError,
    LineageCorruptError,
    LineageNotFoundError,
    QueryError,
    ReuseError,
)

if TYPE_CHECKING:
    from dslog_dagster.core.reuse import ViewRegistry

__all__ = [
    "Array",
    "DSLog",
    "Hop",
    "Lineage",
    "QueryPlan",
    "lineage_between",
    "prov_query",
    "register_operation",
]

# How many prepared tables a session keeps (each holds its table and two sort orders).
PREPARED_CACHE_SIZE = 512
# Bound on the path search over array versions (each step tries one operation).
MAX_PATH_SEARCH_STEPS = 100_000


@dataclass(frozen=True, slots=True)
class Array:
    """A tracked array: ``Array("img", (1080, 1920))``.

    ``version`` pins a data version (``None`` = the default/latest); ``dtype`` is recorded.
    """

    name: str
    shape: Shape
    dtype: str = "float64"
    version: str | None = None

    def __init__(
        self,
        name: str,
        shape: Sequence[int] | int,
        dtype: str = "float64",
        version: str | None = None,
    ) -> None:
        name = check_name(name, "Array name")
        if version is not None:
            version = check_name(version, f"Version of array `{name}`")
        dtype_name(dtype, f"Array `{name}`")  # refused here, not when it is registered
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "shape", as_shape(shape, f"Array `{name}`"))
        object.__setattr__(self, "dtype", str(np.dtype(dtype)))
        object.__setattr__(self, "version", version)


ArrayLikeRef: TypeAlias = str | Array | ArrayRecord
CellCapture: TypeAlias = Callable[[tuple[int, ...]], Iterable[Any]]


class Lineage:
    """Lineage between two arrays, from any capture method (the paper's ``Lineage`` object).

    ``capture`` may be:

    * a :class:`LineageRelation` or a compressed :class:`LineageTable`;
    * a callable ``capture(out_index) -> iterable of input cells`` (index tuples, or ints for a
      rank-1 input), called once per output cell — the paper's interface;
    * a list of ``(output box, input box)`` pairs (tuples of ints/slices, ``np.s_[...]``),
      each meaning every cell of the output box depends on every cell of the input box;
    * an ``(n, l + m)`` integer array of (output index..., input index...) pairs.
    """

    def __init__(self, out: ArrayLikeRef, in_: ArrayLikeRef, capture: object) -> None:
        self.out = out
        self.input = in_
        self.capture = capture

    @property
    def out_name(self) -> str:
        return _name_of(self.out)

    @property
    def in_name(self) -> str:
        return _name_of(self.input)

    def resolve(self, out_shape: Shape, in_shape: Shape) -> LineageRelation | LineageTable:
        """The relation (or table) this lineage stands for, checked against the shapes."""
        cap = self.capture
        where = f"Lineage `{self.out_name}` ← `{self.in_name}`"
        if isinstance(cap, LineageRelation | LineageTable):
            if (cap.out_shape, cap.in_shape) != (out_shape, in_shape):
                msg = (
                    f"{where}: the relation connects shapes {cap.out_shape} ← {cap.in_shape}, "
                    f"the arrays have shapes {out_shape} ← {in_shape}."
                )
                raise InvalidRelationError(msg)
            return cap
        if callable(cap):
            return from_callable(cap, out_shape, in_shape, where)
        if isinstance(cap, np.ndarray) and cap.dtype != object:
            l, m = len(out_shape), len(in_shape)
            if cap.ndim != 2 or cap.shape[1] != l + m:
                msg = (
                    f"{where}: a pair matrix must have shape (n, {l + m}) (output indices, then "
                    f"input indices); got {cap.shape}."
                )
                raise InvalidRelationError(msg)
            return LineageRelation.from_pairs(out_shape, in_shape, cap[:, :l], cap[:, l:])
        if isinstance(cap, list | tuple):
            return from_box_pairs(list(cap), out_shape, in_shape, where)
        msg = (
            f"{where}: cannot use a capture of type {type(cap).__name__}; pass a "
            "LineageRelation, a per-cell callable, (output box, input box) pairs or a pair matrix."
        )
        raise InvalidRelationError(msg)

    def __repr__(self) -> str:
        return f"Lineage({self.out_name!r} ← {self.in_name!r})"


def _name_of(a: ArrayLikeRef) -> str:
    if isinstance(a, Array | ArrayRecord):
        return a.name
    if isinstance(a, str):
        return a
    msg = f"Expected an array name, Array or ArrayRecord, got {type(a).__name__}."
    raise QueryError(msg)


def _as_tables(
    lineage: Mapping[tuple[int, int, int], LineageRelation | LineageTable],
) -> dict[tuple[int, int, int], LineageTable]:
    return {k: v if isinstance(v, LineageTable) else compress(v) for k, v in lineage.items()}


@dataclass(frozen=True, slots=True)
class Hop:
    """One resolved hop of a query path."""

    src: ArrayRecord
    dst: ArrayRecord
    direction: Direction
    operation: OperationRecord
    prepared: PreparedHop | None  # None: the operation links the arrays with no lineage

    def run(self, cells: CellSet) -> CellSet:
        if self.prepared is None:
            if self.operation.capture_method == DEFERRED:
                raise deferred_error(self.operation)
            return CellSet.empty(self.dst.shape)
        return self.prepared.run(cells, self.direction)

    def describe(self) -> str:
        arrow = "→" if self.direction == "forward" else "←"
        table = "no lineage" if self.prepared is None else "table"
        return (
            f"{self.src.name} {arrow} {self.dst.name} via {self.operation.op_name} "
            f"({self.operation.op_id[:12]}…, {self.direction}, {table})"
        )


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """A resolved path: run it on many cell sets without touching the store again."""

    hops: tuple[Hop, ...]

    @property
    def source(self) -> ArrayRecord:
        return self.hops[0].src

    @property
    def target(self) -> ArrayRecord:
        return self.hops[-1].dst

    def run(self, cells: object) -> CellSet:
        """Cells of the last array linked to ``cells`` of the first (any form of
        :func:`~dslog_dagster.core.query.as_cells`)."""
        cur = as_cells(self.source.shape, cells)
        for h in self.hops:
            if h.prepared is None and h.operation.capture_method == DEFERRED:
                raise deferred_error(h.operation)
        prepared = [(h.prepared, h.direction) for h in self.hops if h.prepared is not None]
        if len(prepared) < len(self.hops):  # a hop without lineage: nothing gets through
            return CellSet.empty(self.target.shape)
        return run_hops(prepared, cur)

    def __str__(self) -> str:
        return "\n".join(h.describe() for h in self.hops)


class DSLog:
    """A DSLog session over a lineage store.

    Args:
        store: a :class:`LineageStore` or the directory of one (created when missing).

    Examples:
        >>> log = DSLog("lineage-store")
        >>> x, y = Array("x", (4, 4)), Array("y", (4, 4))
        >>> neg = Lineage(y, x, lambda b: [b])
        >>> op = log.register_operation("negative", [x], [y], [neg])
        >>> log.prov_query([y, x], np.s_[0, :]).to_indices().tolist()
        [[0, 0], [0, 1], [0, 2], [0, 3]]
    """

    def __init__(self, store: LineageStore | str | os.PathLike[str]) -> None:
        self.store = store if isinstance(store, LineageStore) else LineageStore(store)
        self._prepared: OrderedDict[tuple[str, str, str], PreparedHop | None] = OrderedDict()
        self._plans: dict[tuple[Any, ...], QueryPlan] = {}
        self._plans_state: tuple[Any, ...] = ()

    def __repr__(self) -> str:
        return f"DSLog({str(self.store.root)!r})"

    # ------------------------------------------------------------- registration

    def array(self, array: Array | str, shape: Sequence[int] | int | None = None) -> ArrayRecord:
        """Register an array (idempotent) and return its record."""
        if isinstance(array, str):
            if shape is None:
                return self.store.get_array(array)
            array = Array(array, shape)
        return self.store.register_array(
            array.name, array.shape, array.dtype, version=array.version
        )

    def register_operation(
        self,
        op_name: str,
        in_arrs: Sequence[Array | str],
        out_arrs: Sequence[Array | str],
        capture: Sequence[Lineage] | Mapping[tuple[str, str], object] | None = None,
        op_args: Mapping[str, Any] | None = None,
        *,
        capture_method: str = "user",
        reuse: "ViewRegistry | None" = None,
        code_version: str | None = None,
    ) -> OperationRecord:
        """Register one execution of ``op_name`` with its lineage (paper: ``register_operation``).

        Args:
            op_name: the operation's name.
            in_arrs / out_arrs: its input and output arrays; :class:`Array` objects are
                registered, names must already be registered.
            capture: :class:`Lineage` objects, or ``{(output name, input name): capture}``
                with any capture :class:`Lineage` accepts. Pairs left out have no lineage.
                May be None only when ``reuse`` has a confirmed view for the call.
            op_args: JSON-able arguments (recorded for reuse signatures and audits).
            capture_method: how the lineage was obtained (``"user"``, ``"annotator"``, ...).
            reuse: a :class:`~dslog_dagster.core.ViewRegistry` (ICDE's ``reuse=True``). When
                one of its confirmed views matches ``(op_name, op_args, shapes)`` (or the
                exact input versions), its tables are stored and ``capture`` is not resolved
                — except to verify the view on new shapes and on a sample of calls, when
                ``capture`` is given. Otherwise ``capture`` is stored and fed to the registry.
                The record's ``capture_method`` says how the lineage was obtained:
                ``"view-base"``, ``"view-dim"``, ``"view-gen"`` or the given method.
            code_version: part of the operation's reuse signature; change it when the
                operation's code changes, to invalidate its views.

        Raises:
            ReuseError: ``capture`` is None and no confirmed view matches.
        """
        ins = [self.array(a) for a in in_arrs]
        outs = [self.array(a) for a in out_arrs]
        in_ids = (
            None
            if any(r.version is None for r in ins)
            else [f"{r.array_id}:{r.name}:{r.version}" for r in ins]
        )
        in_shapes = [r.shape for r in ins]
        out_shapes = [r.shape for r in outs]
        if reuse is not None:
            hit = reuse.find_declared(
                op_name,
                args=op_args,
                in_ids=in_ids,
                in_shapes=in_shapes,
                out_shapes=out_shapes,
                code_version=code_version,
            )
            if hit is not None:
                actual = None
                if capture is not None and hit.needs_check:
                    actual = _as_tables(self._declared_lineage(op_name, ins, outs, capture))
                if reuse.settle_declared(hit, actual):
                    lineage: dict[tuple[str, str], LineageRelation | LineageTable] = {
                        (outs[o].name, ins[i].name): t
                        for (w, o, i), t in hit.tables.items()
                        if w == 0
                    }
                    rec = self.store.register_operation(
                        op_name, ins, outs, lineage, args=op_args,
                        capture_method=f"view-{hit.kind}",
                        effects=array_effects(outs, ins, lineage),
                    )  # fmt: skip
                    return rec
        if capture is None:
            msg = (
                f"Operation `{op_name}`: no lineage given (`capture=None`) and no confirmed "
                "provenance view matches this call; pass the capture."
            )
            raise ReuseError(msg)
        declared: Mapping[tuple[int, int, int], LineageRelation | LineageTable]
        declared = self._declared_lineage(op_name, ins, outs, capture)
        if reuse is not None:
            tables = _as_tables(declared)
            declared = tables
            reuse.observe_declared(
                op_name,
                args=op_args,
                in_ids=in_ids,
                in_shapes=in_shapes,
                out_shapes=out_shapes,
                tables=tables,
                code_version=code_version,
            )
        lineage = {(outs[o].name, ins[i].name): t for (_, o, i), t in declared.items()}
        rec = self.store.register_operation(
            op_name, ins, outs, lineage, args=op_args, capture_method=capture_method,
            effects=array_effects(outs, ins, lineage),
        )  # fmt: skip
        return rec

    def _declared_lineage(
        self,
        op_name: str,
        ins: list[ArrayRecord],
        outs: list[ArrayRecord],
        capture: Sequence[Lineage] | Mapping[tuple[str, str], object],
    ) -> dict[tuple[int, int, int], LineageRelation | LineageTable]:
        """Resolve a declared capture, keyed ``(0, output index, input index)``."""
        by_name = {r.name: r for r in [*ins, *outs]}
        if isinstance(capture, Mapping):
            lineages = [Lineage(o, i, c) for (o, i), c in capture.items()]
        else:
            lineages = list(capture)
            if not all(isinstance(x, Lineage) for x in lineages):
                msg = f"Operation `{op_name}`: `capture` must be Lineage objects or a mapping."
                raise InvalidRelationError(msg)
        tables: dict[tuple[int, int, int], LineageRelation | LineageTable] = {}
        for lin in lineages:
            o, i = by_name.get(lin.out_name), by_name.get(lin.in_name)
            if o is None or i is None or o not in outs or i not in ins:
                msg = (
                    f"Operation `{op_name}`: {lin!r} does not connect one of its outputs "
                    f"{[r.name for r in outs]} to one of its inputs {[r.name for r in ins]}."
                )
                raise InvalidRelationError(msg)
            tables[(0, outs.index(o), ins.index(i))] = lin.resolve(o.shape, i.shape)
        return tables

    # ------------------------------------------------------------- graph

    def _versions(self, ref: ArrayLikeRef, piece: GraphPiece) -> list[Node]:
        """Candidate versions of a path element, newest first: those operations of ``piece``
        touch, and the newest registered one."""
        if isinstance(ref, ArrayRecord):
            return [_node(ref)]
        if isinstance(ref, Array):
            if ref.version is not None:
                rec = self.store.get_array(ref.name, ref.version)
                if rec.shape != ref.shape:
                    msg = (
                        f"Array `{ref.name}` is registered with shape {rec.shape}, not {ref.shape}."
                    )
                    raise QueryError(msg)
                return [_node(rec)]
            name = ref.name
        else:
            name = _name_of(ref)
        latest = piece.latest.get(name)
        if latest is None:  # not indexed: read from the files (or a clear "no such array")
            latest = _node(self.store.get_array(name))
        recs = {n.array_id: n for n in piece.versions.get(name, [])}
        recs.setdefault(latest.array_id, latest)
        return sorted(recs.values(), key=Node.age_key, reverse=True)

    def _hops(self, edges: Sequence[Edge]) -> list[Hop]:
        """The hops of ``edges``, their operation records read a segment at a time.

        Raises:
            LineageNotFoundError / LineageCorruptError: an operation vanished (or is damaged)
                since the catalog listed it.
        """
        ops = load_records(self.store, edges)
        hops = []
        for e in edges:
            op = ops.get(e.op_id)
            if op is None:  # moved by a compaction since the catalog listed it, or damaged
                try:
                    op = self.store.get_operation(e.op_id)
                except LineageNotFoundError:
                    # its file could not be read: if that is damage (now noted), say so
                    self._refuse_if_damaged({e.src.name, e.dst.name})
                    raise
            src, dst = array_of(op, e.src.array_id), array_of(op, e.dst.array_id)
            out, inp = (dst.name, src.name) if e.direction == "forward" else (src.name, dst.name)
            hops.append(Hop(src, dst, e.direction, op, self._prepared_for(op, out, inp)))
        return hops

    def _prepared_for(self, op: OperationRecord, out: str, inp: str) -> PreparedHop | None:
        key = (op.op_id, out, inp)
        if key in self._prepared:
            self._prepared.move_to_end(key)
            return self._prepared[key]
        if not any(t.output == out and t.input == inp for t in op.tables):
            hop = None
        else:
            hop = prepare(self.store.read_lineage(op, out, inp))
        self._prepared[key] = hop
        if len(self._prepared) > PREPARED_CACHE_SIZE:
            self._prepared.popitem(last=False)
        return hop

    # ------------------------------------------------------------- queries

    def plan(self, path: Sequence[ArrayLikeRef]) -> QueryPlan:
        """Resolve a path of arrays into hops (most recent consistent chain of operations).

        Raises:
            QueryError: a path of fewer than two arrays.
            LineageNotFoundError: an unknown array, or consecutive arrays no operation links.
        """
        if (
            isinstance(path, str | Array | ArrayRecord)
            or not isinstance(path, Sequence)
            or len(path) < 2
        ):
            msg = "A query path is a sequence of at least two arrays, e.g. ['y', 'x']."
            raise QueryError(msg)
        for p in path:
            _name_of(p)  # names, Arrays or ArrayRecords only (a clear error, up front)
        key = tuple(
            (p.array_id,)
            if isinstance(p, ArrayRecord)
            else (p.name, p.version)
            if isinstance(p, Array)
            else (p,)
            for p in path
        )
        names = [_name_of(p) for p in path]
        piece = path_piece(self.store, names)  # one catalog read: the edges and versions
        if piece.state != self._plans_state:  # something was registered since
            self._plans.clear()
            self._plans_state = piece.state
        cached = self._plans.get(key)
        if cached is not None:
            return cached
        self._refuse_if_damaged(set(names))
        versions = [self._versions(p, piece) for p in path]  # unknown arrays fail here
        pinned = [
            {r.array_id for r in vs}
            if isinstance(p, ArrayRecord) or (isinstance(p, Array) and p.version is not None)
            else None
            for p, vs in zip(path, versions, strict=True)
        ]
        starts = versions[0]
        steps = 0
        chain: list[Edge] = []

        def search(node: Node, i: int) -> bool:
            nonlocal steps
            if i == len(names) - 1:
                return True
            for edge in piece.neighbours(node.array_id, names[i + 1]):
                steps += 1
                if steps > MAX_PATH_SEARCH_STEPS:
                    return False
                allowed = pinned[i + 1]
                if allowed is not None and edge.dst.array_id not in allowed:
                    continue
                chain.append(edge)
                if search(edge.dst, i + 1):
                    return True
                chain.pop()
            return False

        if not any(search(s, 0) for s in starts):
            raise LineageNotFoundError(self._no_path_message(names, starts, piece))
        plan = QueryPlan(tuple(self._hops(chain)))
        self._plans[key] = plan
        return plan

    def _refuse_if_damaged(self, names: set[str]) -> None:
        """Refuse (:class:`LineageCorruptError`) a query over arrays ``names`` that a damaged
        operation may touch (or one whose arrays are unknown): the graph skips damaged
        operations, so it could otherwise pick an older one, or miss a path."""
        for rel, touched in self.store.damaged_arrays().items():
            if touched is None or touched & names:
                which = "arrays not known" if touched is None else ", ".join(sorted(touched))
                msg = (
                    f"Cannot answer a query over {sorted(names)}: the damaged file `{rel}` of "
                    f"the store at `{self.store.root}` held operations on them ({which}). "
                    "Run `dslog fsck STORE --quarantine` to move it aside (queries then use "
                    "what is left) or restore it from a backup."
                )
                raise LineageCorruptError(msg, self.store.root / rel)

    def _no_path_message(self, names: list[str], starts: list[Node], piece: GraphPiece) -> str:
        # find the first hop that no operation links, ignoring versions, for a useful message
        for a, b in itertools.pairwise(names):
            linked = any(piece.neighbours(r.array_id, b) for r in self._versions(a, piece))
            if not linked:
                return (
                    f"No registered operation links `{a}` and `{b}` directly (in either "
                    f"direction), so the path {names} cannot be queried. If they are linked "
                    "through other arrays, name those in the path or ask for the union over "
                    f"every path (`lineage_between({reprlib.repr(a)}, {reprlib.repr(b)})`, "
                    "`dslog query --between`); "
                    "otherwise register the operation that reads one and writes the other."
                )
        have = ", ".join(f"`{r.version}`" for r in starts)
        return (
            f"The path {names} has operations for every hop, but no chain of them agrees on the "
            f"array versions (versions of `{names[0]}`: {have}); re-run the operations or pin "
            "versions with Array(name, shape, version=...)."
        )

    def prov_query(self, path: Sequence[ArrayLikeRef], cells: object) -> CellSet:
        """Cells of the last array of ``path`` linked to ``cells`` of the first (paper:
        ``prov_query``). Consecutive arrays must be linked by an operation, either way.

        ``cells``: a box (``np.s_[0:10, 3]``), index tuples, a boolean mask or flat indices.
        The result is a :class:`CellSet`: ``.to_arrow()`` boxes, ``.to_flat()``,
        ``.to_mask()``, ``.count()``.
        """
        return self.plan(path).run(cells)

    def lineage_between(
        self,
        src: ArrayLikeRef,
        dst: ArrayLikeRef,
        cells: object,
        *,
        direction: Direction | None = None,
        run_hop: Callable[[Hop, CellSet], CellSet] | None = None,
    ) -> CellSet:
        """Cells of ``dst`` linked to ``cells`` of ``src`` over EVERY path of operations
        between them (all forward if ``dst`` is downstream, all backward if upstream).

        Uses the newest version of each array given by name. ``direction`` insists on one
        direction (``"forward"``: ``dst`` must be downstream of ``src``); ``None`` tries both.
        ``run_hop`` answers one hop on another engine (the Spark query engine passes its own);
        the default is the native in-situ :meth:`Hop.run`.

        Raises:
            LineageNotFoundError: unknown arrays or no path between them.
        """
        d_name = _name_of(dst)
        piece = path_piece(self.store, [_name_of(src), d_name])
        s = self._versions(src, piece)[0]
        if self.store.damaged_arrays():  # only then: the names reachable from s either way
            reach = reachable_piece(self.store, s.array_id, None)
            reached = {e.dst.name for lst in reach.edges.values() for e in lst}
            self._refuse_if_damaged({s.name, d_name, *reached})
        d_ids = {r.array_id for r in self._versions(dst, piece)}  # one id when dst is pinned
        start = as_cells(s.shape, cells)
        tried: tuple[Direction, ...] = (
            ("forward", "backward") if direction is None else (direction,)
        )
        for way in tried:
            edges = reachable_piece(self.store, s.array_id, way).edges
            result = self._union_over_paths(s, d_ids, start, edges, run_hop or Hop.run)
            if result is not None:
                return result
        if direction is None:
            msg = (
                f"No chain of operations leads from `{s.name}` to `{d_name}` in either "
                "direction; `lineage_between` needs one array to be upstream of the other."
            )
        else:
            where = "downstream" if direction == "forward" else "upstream"
            msg = (
                f"No chain of operations leads {direction} from `{s.name}` to `{d_name}` "
                f"(`{d_name}` is not {where} of `{s.name}`); swap the arrays or the direction."
            )
        raise LineageNotFoundError(msg)

    def _union_over_paths(
        self,
        s: Node,
        d_ids: set[str],
        start: CellSet,
        edges: Mapping[str, list[Edge]],
        run_hop: Callable[[Hop, CellSet], CellSet],
    ) -> CellSet | None:
        """The union over every path of ``edges`` (the graph reachable from ``s`` one way)."""
        # nodes reachable from s, then a topological order of them (the graph is a DAG over
        # array versions; a cycle would mean an operation wrote one of its own inputs)
        recs: dict[str, Node] = {s.array_id: s}
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(u: str) -> None:
            stack = [(u, iter(edges.get(u, [])))]
            state[u] = 1
            while stack:
                node, it = stack[-1]
                for e in it:
                    nxt = e.dst
                    recs.setdefault(nxt.array_id, nxt)
                    st = state.get(nxt.array_id, 0)
                    if st == 1:
                        msg = (
                            f"The lineage graph has a cycle through `{nxt.name}`; "
                            "cannot union its paths."
                        )
                        raise QueryError(msg)
                    if st == 0:
                        state[nxt.array_id] = 1
                        stack.append((nxt.array_id, iter(edges.get(nxt.array_id, []))))
                        break
                else:
                    state[node] = 2
                    order.append(node)
                    stack.pop()

        visit(s.array_id)
        order.reverse()
        targets = [recs[u] for u in order if u in d_ids and u != s.array_id]
        if not targets:
            return None
        target = max(targets, key=Node.age_key).array_id
        # only nodes that can reach the target matter
        useful = {target}
        for u in reversed(order):
            if any(e.dst.array_id in useful for e in edges.get(u, [])):
                useful.add(u)
        steps: list[Edge] = []  # in topological order of their source
        for u in order:
            if u not in useful or u == target:
                continue
            seen: set[str] = set()  # newest operation per (u, next) only: re-runs repeat it
            for e in edges.get(u, []):
                if e.dst.array_id in useful and e.dst.array_id not in seen:
                    seen.add(e.dst.array_id)
                    steps.append(e)
        cells: dict[str, CellSet] = {s.array_id: start}
        for e, hop in zip(steps, self._hops(steps), strict=True):
            if e.src.array_id not in cells:
                continue
            got = run_hop(hop, cells[e.src.array_id])
            prev = cells.get(e.dst.array_id)
            cells[e.dst.array_id] = got if prev is None else prev | got
        return cells.get(target, CellSet.empty(recs[target].shape))


def _node(rec: ArrayRecord) -> Node:
    created = rec.created_at
    if created.tzinfo is None:  # records are written in UTC
        created = created.replace(tzinfo=UTC)
    return Node(rec.array_id, rec.name, rec.version, tuple(rec.shape), created)


# ----------------------------------------------------------------- module-level API

_default: DSLog | None = None


def default_session() -> DSLog:
    """The session the module-level functions use: ``$DSLOG_STORE`` or ``./.dslog``."""
    global _default
    root = Path(os.environ.get("DSLOG_STORE", ".dslog")).absolute()
    if _default is None or _default.store.root != root:
        _default = DSLog(root)
    return _default


def register_operation(
    op_name: str,
    in_arrs: Sequence[Array | str],
    out_arrs: Sequence[Array | str],
    capture: Sequence[Lineage] | Mapping[tuple[str, str], object] | None = None,
    op_args: Mapping[str, Any] | None = None,
    *,
    session: DSLog | None = None,
    reuse: "ViewRegistry | None" = None,
    code_version: str | None = None,
) -> OperationRecord:
    """:meth:`DSLog.register_operation` on ``session`` (default: :func:`default_session`)."""
    return (session or default_session()).register_operation(
        op_name, in_arrs, out_arrs, capture, op_args, reuse=reuse, code_version=code_version
    )


def prov_query(
    path: Sequence[ArrayLikeRef], cells: object, *, session: DSLog | None = None
) -> CellSet:
    """:meth:`DSLog.prov_query` on ``session`` (default: :func:`default_session`)."""
    return (session or default_session()).prov_query(path, cells)


def lineage_between(
    src: ArrayLikeRef,
    dst: ArrayLikeRef,
    cells: object,
    *,
    direction: Direction | None = None,
    session: DSLog | None = None,
) -> CellSet:
    """:meth:`DSLog.lineage_between` on ``session`` (default: :func:`default_session`)."""
    return (session or default_session()).lineage_between(src, dst, cells, direction=direction)
