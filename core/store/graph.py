"""The operation graph of a store, asked of its catalog a piece at a time.

A query needs the operations between the few arrays it names, never the store's 100,000
operations. Building the whole graph in memory (every operation record read from its
segment) made a fresh process's first query cost about 2 ms per operation in the store. So a
query asks the catalog, in one read (one DuckDB connection: each costs tens of ms), for the
piece of the graph it walks, as light :class:`Node` / :class:`Edge` values:

* :func:`path_piece` — the operations linking consecutive arrays of a path (either way), and
  the versions of those arrays;
* :func:`reachable_piece` — the operations reachable from one array version in one direction
  (a recursive query), for the union over every path.

Only the records of the operations a query then uses are read (:func:`load_records`, a
segment at a time). The catalog syncs before it answers, so the piece includes what other
processes registered.
"""

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from dslog_dagster.core.store.sql_text import literal, literal_list

if TYPE_CHECKING:
    import duckdb

    from dslog_dagster.core.store.records import ArrayRecord, OperationRecord
    from dslog_dagster.core.store.store import LineageStore

Way = Literal["forward", "backward"]
_OLDEST = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Node:
    """One array version as the catalog knows it (``created_at`` is ``None`` when its array
    record is not indexed, e.g. damaged)."""

    array_id: str
    name: str
    version: str | None
    shape: tuple[int, ...]
    created_at: datetime | None

    def age_key(self) -> tuple[datetime, str]:
        """Sort key, oldest first (an unknown registration time sorts oldest)."""
        return (self.created_at or _OLDEST, self.version or "")


@dataclass(frozen=True)
class Edge:
    """Operation ``op_id`` (held by segment ``path``) links ``src`` to ``dst``: ``forward``
    when it reads ``src`` and writes ``dst``."""

    op_id: str
    path: str
    src: Node
    dst: Node
    direction: Way


@dataclass
class GraphPiece:
    """Edges out of each array version (by array id, newest operation first) and the known
    versions of each name (newest first), of the part of the graph a query asked for."""

    edges: dict[str, list[Edge]] = field(default_factory=dict)
    versions: dict[str, list[Node]] = field(default_factory=dict)
    latest: dict[str, Node] = field(default_factory=dict)
    """The newest registered version of each name, as the catalog indexed it."""
    state: tuple[Any, ...] = ()
    """The catalog's ``(operation count, newest op id)`` when read: a cache key."""

    def add(self, edge: Edge) -> None:
        self.edges.setdefault(edge.src.array_id, []).append(edge)

    def sort(self) -> None:
        for lst in self.edges.values():
            lst.sort(key=lambda e: e.op_id, reverse=True)
        for vs in self.versions.values():
            vs.sort(key=Node.age_key, reverse=True)

    def neighbours(self, array_id: str, name: str) -> list[Edge]:
        """Edges from ``array_id`` to a version of ``name``, newest operation first."""
        return [e for e in self.edges.get(array_id, []) if e.dst.name == name]


_EDGE_COLUMNS = (
    "i.op_id, o.path, i.array_id, i.name, i.version, i.shape, ia.created_at, "
    "w.array_id, w.name, w.version, w.shape, wa.created_at"
)
_EDGE_FROM = (
    "operation_arrays i JOIN operation_arrays w ON w.op_id = i.op_id AND w.role = 'output' "
    "JOIN operations o ON o.op_id = i.op_id "
    "LEFT JOIN arrays ia ON ia.array_id = i.array_id "
    "LEFT JOIN arrays wa ON wa.array_id = w.array_id"
)


_NAMED_ROWS = (
    "x AS (SELECT * FROM operation_arrays WHERE name IN (SELECT unnest({names}))), "
    "a AS (SELECT array_id, created_at FROM arrays WHERE name IN (SELECT unnest({names})))"
)
"""The ``operation_arrays`` rows (``x``) and array times (``a``) of the names asked for (an
array id belongs to one name, so the arrays of those rows are all in ``a``); ``{names}`` is
their :func:`~dslog_dagster.core.store.sql_text.literal_list` (no parameter binds: see
:mod:`~dslog_dagster.core.store.sql_text`)."""
_NAMED_FROM = (
    "x i JOIN x w ON w.op_id = i.op_id AND w.role = 'output' "
    "JOIN operations o ON o.op_id = i.op_id "
    "LEFT JOIN a ia ON ia.array_id = i.array_id "
    "LEFT JOIN a wa ON wa.array_id = w.array_id"
)


def _node(row: Sequence[Any]) -> Node:
    array_id, name, version, shape, created = row
    if created is not None and created.tzinfo is None:  # the catalog keeps naive UTC
        created = created.replace(tzinfo=UTC)
    return Node(str(array_id), str(name), version, tuple(int(d) for d in shape or ()), created)


def _add_rows(piece: GraphPiece, rows: Iterable[Sequence[Any]], ways: Sequence[Way]) -> None:
    for r in rows:
        op_id, path = str(r[0]), str(r[1])
        inp, out = _node(r[2:7]), _node(r[7:12])
        for way in ways:
            src, dst = (inp, out) if way == "forward" else (out, inp)
            piece.add(Edge(op_id, path, src, dst, way))


def _state(con: "duckdb.DuckDBPyConnection") -> tuple[Any, ...]:
    row = con.execute("SELECT count(*), max(op_id) FROM operations").fetchone()
    return tuple(row or ())


def path_piece(store: "LineageStore", names: Sequence[str]) -> GraphPiece:
    """The operations linking consecutive ``names`` (either way), every version of each
    name that an operation read or wrote, and its newest registered one, in one catalog
    read."""
    pairs = sorted(set(itertools.pairwise(names)))
    lit = {n: literal(n) for n in names}
    conds = " OR ".join(
        f"(i.name = {lit[a]} AND w.name = {lit[b]}) OR (i.name = {lit[b]} AND w.name = {lit[a]})"
        for a, b in pairs
    )
    wanted = literal_list(sorted(set(names)))
    named = _NAMED_ROWS.format(names=wanted)

    def read(con: "duckdb.DuckDBPyConnection") -> GraphPiece:
        piece = GraphPiece(state=_state(con))
        if pairs:
            # Both ends of every edge are arrays of the path: the rows of those names are
            # picked first, so the joins see a few hundred rows, not the store's 200,000.
            rows = con.execute(
                f"WITH {named} SELECT DISTINCT {_EDGE_COLUMNS} FROM {_NAMED_FROM} "
                f"WHERE i.role = 'input' AND ({conds})"
            ).fetchall()
            _add_rows(piece, rows, ("forward", "backward"))
        rows = con.execute(
            f"WITH {named} SELECT x.array_id, any_value(x.name), any_value(x.version), "
            "any_value(x.shape), any_value(a.created_at) FROM x "
            "LEFT JOIN a ON a.array_id = x.array_id GROUP BY x.array_id"
        ).fetchall()
        for r in rows:
            node = _node(r)
            piece.versions.setdefault(node.name, []).append(node)
        rows = con.execute(
            "SELECT array_id, name, version, shape, created_at FROM arrays "
            f"WHERE name IN (SELECT unnest({wanted})) QUALIFY row_number() OVER "
            "(PARTITION BY name ORDER BY created_at DESC, coalesce(version, '') DESC) = 1"
        ).fetchall()
        piece.latest = {str(r[1]): _node(r) for r in rows}
        piece.sort()
        return piece

    return store.catalog.read(read)


def reachable_piece(store: "LineageStore", start: str, way: Way | None) -> GraphPiece:
    """The edges reachable from array version ``start`` going ``way`` (``None``: either way,
    each edge then given in both directions), in one catalog read."""
    src, dst = ("i", "w") if way == "forward" else ("w", "i")
    step = (
        f"SELECT {dst}.array_id FROM reach r JOIN operation_arrays {src} "
        f"ON {src}.array_id = r.array_id AND {src}.role = '{'input' if src == 'i' else 'output'}' "
        f"JOIN operation_arrays {dst} ON {dst}.op_id = {src}.op_id "
        f"AND {dst}.role = '{'input' if dst == 'i' else 'output'}'"
    )
    if way is None:  # undirected: through any operation, from either side
        step = (
            "SELECT y.array_id FROM reach r JOIN operation_arrays x ON x.array_id = r.array_id "
            "JOIN operation_arrays y ON y.op_id = x.op_id"
        )
    ends = "i.array_id" if way in (None, "forward") else "w.array_id"

    def read(con: "duckdb.DuckDBPyConnection") -> GraphPiece:
        piece = GraphPiece(state=_state(con))
        rows = con.execute(
            f"WITH RECURSIVE reach(array_id) AS (SELECT {literal(start)}::VARCHAR UNION {step}) "
            f"SELECT DISTINCT {_EDGE_COLUMNS} FROM {_EDGE_FROM} "
            f"WHERE i.role = 'input' AND ({ends} IN (SELECT array_id FROM reach)"
            + (" OR w.array_id IN (SELECT array_id FROM reach))" if way is None else ")")
        ).fetchall()
        _add_rows(piece, rows, ("forward", "backward") if way is None else (way,))
        piece.sort()
        return piece

    return store.catalog.read(read)


def load_records(store: "LineageStore", edges: Iterable[Edge]) -> dict[str, "OperationRecord"]:
    """The records of the operations of ``edges``, a segment at a time; those not where the
    catalog put them (moved by a compaction since, or damaged) are left out: read them with
    ``store.get_operation``, which looks for them and reports damage."""
    return store.operation_files.read_many({e.op_id: e.path for e in edges})


def array_of(op: "OperationRecord", array_id: str) -> "ArrayRecord":
    """The record of array version ``array_id`` as operation ``op`` read or wrote it.

    Raises:
        KeyError: ``op`` does not touch it (the catalog disagrees with the record).
    """
    for a in (*op.inputs, *op.outputs):
        if a.array_id == array_id:
            return a
    raise KeyError(array_id)
