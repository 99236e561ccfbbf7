"""W3C PROV documents of stored lineage: an asset version's derivation, or a query's answer.

DPDS models dataframe provenance in PROV (``used``, ``wasGeneratedBy``, ``wasDerivedFrom``,
``hadMember``) with one node per element; on a million-cell array that is a million nodes per
step. Here the document follows the *compressed* lineage instead, so its size is that of the
stored ProvRC tables:

* an **array version** is an entity (``prov:type`` ``dslog:Array`` and ``prov:Collection``)
  with its name, version, shape, dtype and Dagster asset key;
* an **operation** is an activity (``prov:label`` its name, ``dslog:captureMethod``, its
  arguments as JSON, ended at its registration time) that ``used`` its inputs; its outputs
  ``wasGeneratedBy`` it and ``wasDerivedFrom`` each input through it;
* each **ProvRC row** of a lineage table is a pair of *cell boxes*: entities of type
  ``dslog:CellBox``, members (``hadMember``) of their arrays, the output box
  ``wasDerivedFrom`` the input box through the operation. ``dslog:box`` spells the cells as a
  person reads them, half-open per axis (``0:10, 3:4``); an input axis relative to the output
  cell ``b`` is spelled ``b0-1:b0+2`` (see :mod:`dslog_dagster.core.provrc` for the strided,
  mirrored and pooled forms). The derivation carries ``dslog:row``, the row's exact fields as
  JSON, so :func:`lineage_tables` reads the tables back from a document exactly;
* a **query answer** (:func:`query_document`) is one entity per array of the path holding the
  selected cells (``dslog:CellSelection``), its boxes as members, each selection derived from
  the previous one through the hop's operation.

:func:`to_text` gives PROV-JSON or PROV-N (``dslog prov`` on the command line). The ``prov``
package is the ``[export]`` extra.
"""

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dslog_dagster.core.api import DSLog
from dslog_dagster.core.display import spell_constraint, spell_span
from dslog_dagster.core.provrc import PROVRC_FIELDS, LineageTable
from dslog_dagster.core.query import CellSet, as_cells
from dslog_dagster.core.store import ArrayRecord, LineageStore, OperationRecord
from dslog_dagster.errors import ExportError
from dslog_dagster.extras import require

if TYPE_CHECKING:
    from prov.model import ProvBundle, ProvDocument

__all__ = [
    "DSLOG_NS",
    "MAX_ROWS",
    "TableKey",
    "asset_document",
    "lineage_tables",
    "query_document",
    "to_text",
]

DSLOG_NS = "https://dslog-dagster.dev/ns#"
"""The namespace of dslog's PROV types and attributes (prefix ``dslog``)."""

MAX_ROWS = 100_000
"""Default limit on the ProvRC rows one document spells out (each is three PROV records)."""

Format = Literal["json", "provn"]


@dataclass(frozen=True, slots=True)
class TableKey:
    """Which stored table a :func:`lineage_tables` entry is: operation, output, input."""

    op_id: str
    output: str
    input: str


def _prov() -> Any:
    return require("prov.model", "Exporting lineage as W3C PROV")


def _new_document(store: LineageStore) -> "ProvDocument":
    doc: ProvDocument = _prov().ProvDocument()
    doc.add_namespace("dslog", DSLOG_NS)
    doc.add_namespace("store", f"urn:dslog:store:{store.store_id}:")
    return doc


def _qn(doc: "ProvBundle", name: str) -> Any:
    """``name`` as a qualified name (a PROV type value, not a string)."""
    return doc.valid_qualified_name(name)


def _array_id(a: ArrayRecord) -> str:
    return f"store:array-{a.array_id}"


def _shape(shape: Sequence[int]) -> str:
    return "×".join(str(int(d)) for d in shape) or "scalar"


def _add_array(doc: "ProvBundle", a: ArrayRecord, seen: set[str]) -> str:
    qid = _array_id(a)
    if qid in seen:
        return qid
    seen.add(qid)
    attrs: list[tuple[str, Any]] = [
        ("prov:type", _qn(doc, "dslog:Array")),
        ("prov:type", _qn(doc, "prov:Collection")),
        ("prov:label", a.name if a.version is None else f"{a.name}@{a.version}"),
        ("dslog:name", a.name),
        ("dslog:shape", json.dumps(list(a.shape))),
        ("dslog:dtype", a.dtype),
    ]
    if a.version is not None:
        attrs.append(("dslog:version", a.version))
    if a.asset_key is not None:
        attrs.append(("dslog:assetKey", a.asset_key))
    doc.entity(qid, attrs)
    return qid


def _row_json(t: LineageTable, r: int) -> str:
    return json.dumps([[int(v) for v in getattr(t, f)[:, r]] for f in PROVRC_FIELDS])


def _out_box(t: LineageTable, r: int) -> str:
    return ", ".join(
        spell_span(int(t.out_lo[j, r]), int(t.out_hi[j, r])) for j in range(t.out_rank)
    )


def _in_box(t: LineageTable, r: int) -> str:
    return ", ".join(spell_constraint(t, k, r) for k in range(t.in_rank))


def _add_operation(
    doc: "ProvBundle",
    store: LineageStore,
    op: OperationRecord,
    seen: set[str],
    *,
    cells: bool,
    budget: list[int],
) -> None:
    act = f"store:op-{op.op_id}"
    if act in seen:
        return
    seen.add(act)
    attrs: dict[str, Any] = {
        "prov:type": _qn(doc, "dslog:Operation"),
        "prov:label": op.op_name,
        "dslog:opId": op.op_id,
        "dslog:captureMethod": op.capture_method,
        "dslog:args": json.dumps(op.args, sort_keys=True, default=str),
    }
    doc.activity(act, None, op.created_at, attrs)
    ins = {a.name: _add_array(doc, a, seen) for a in op.inputs}
    outs = {a.name: _add_array(doc, a, seen) for a in op.outputs}
    for qid in ins.values():
        doc.used(act, qid)
    for qid in outs.values():
        doc.wasGeneratedBy(qid, act)
    linked = {(t.output, t.input) for t in op.tables}
    for o, oq in outs.items():
        for i, iq in ins.items():
            if (o, i) in linked:
                doc.wasDerivedFrom(oq, iq, act)
    if not cells:
        return
    for k, rec in enumerate(op.tables):
        table = store.read_lineage(op, rec.output, rec.input).as_provrc()
        budget[0] -= table.rows
        if budget[0] < 0:
            msg = (
                f"The PROV document would spell out more than its limit of ProvRC rows (operation "
                f"`{op.op_name}` `{op.op_id}` alone has {table.rows:,} for `{rec.output}` ← "
                f"`{rec.input}`). Export without cells (`cells=False`, `--no-cells`), export "
                "fewer upstream steps, or raise `max_rows`."
            )
            raise ExportError(msg)
        _add_rows(doc, op, k, table, outs[rec.output], ins[rec.input], act)


def _add_rows(
    doc: "ProvBundle",
    op: OperationRecord,
    k: int,
    t: LineageTable,
    out_q: str,
    in_q: str,
    act: str,
) -> None:
    base = f"store:cells-{op.op_id}-{k}"
    for r in range(t.rows):
        ob, ib = f"{base}-{r}-out", f"{base}-{r}-in"
        doc.entity(ob, {"prov:type": _qn(doc, "dslog:CellBox"), "dslog:box": _out_box(t, r)})
        doc.entity(ib, {"prov:type": _qn(doc, "dslog:CellBox"), "dslog:box": _in_box(t, r)})
        doc.hadMember(out_q, ob)
        doc.hadMember(in_q, ib)
        doc.wasDerivedFrom(
            ob,
            ib,
            act,
            other_attributes={
                "dslog:row": _row_json(t, r),
                "dslog:table": k,
                "dslog:outShape": json.dumps(list(t.out_shape)),
                "dslog:inShape": json.dumps(list(t.in_shape)),
                "dslog:tablePairs": t.n_pairs,
            },
        )


def _upstream(
    store: LineageStore, start: ArrayRecord, depth: int | None
) -> Iterator[OperationRecord]:
    """The operations that produced ``start`` and, up to ``depth`` hops, its inputs': one
    catalog query per hop (a catalog read costs a connection; a chain's hops are few)."""
    frontier, seen_arrays, seen_ops, hop = [start.array_id], {start.array_id}, set[str](), 0
    while frontier and (depth is None or hop < depth):
        ops = store.catalog.column(
            "SELECT DISTINCT op_id FROM operation_arrays "
            "WHERE role = 'output' AND list_contains(?, array_id) ORDER BY op_id",
            [frontier],
        )
        nxt: list[str] = []
        for op_id in ops:
            if op_id in seen_ops:
                continue
            seen_ops.add(op_id)
            op = store.get_operation(str(op_id))
            yield op
            for i in op.inputs:
                if i.array_id not in seen_arrays:
                    seen_arrays.add(i.array_id)
                    nxt.append(i.array_id)
        frontier, hop = nxt, hop + 1


def asset_document(
    store: LineageStore | DSLog,
    array: str | ArrayRecord,
    *,
    version: str | None = None,
    depth: int | None = None,
    cells: bool = True,
    max_rows: int = MAX_ROWS,
) -> "ProvDocument":
    """The PROV document of one array version (an asset materialization): the operations that
    produced it and, transitively, its inputs (``depth`` hops; ``None``: every one), with the
    cell-level lineage as cell boxes (``cells=False``: arrays and operations only).

    Raises:
        LineageNotFoundError: no such array or version.
        ExportError: more than ``max_rows`` ProvRC rows to spell out.
        MissingExtraError: the ``prov`` package is not installed.
    """
    st = store.store if isinstance(store, DSLog) else store
    rec = array if isinstance(array, ArrayRecord) else st.get_array(array, version)
    doc = _new_document(st)
    seen: set[str] = set()
    _add_array(doc, rec, seen)
    budget = [max_rows]
    for op in _upstream(st, rec, depth):
        _add_operation(doc, st, op, seen, cells=cells, budget=budget)
    return doc


def query_document(dslog: DSLog, path: Sequence[Any], cells: object) -> "ProvDocument":
    """The PROV document of a query's answer: the cells selected on every array of ``path``
    (hop by hop, as :meth:`~dslog_dagster.core.api.DSLog.prov_query` runs them), each
    selection derived from the previous one through the hop's operation.

    Raises:
        QueryError / LineageNotFoundError: as :meth:`DSLog.plan` does.
        MissingExtraError: the ``prov`` package is not installed.
    """
    plan = dslog.plan(path)
    doc = _new_document(dslog.store)
    seen: set[str] = set()
    cur = as_cells(plan.source.shape, cells)
    prev = _add_selection(doc, plan.source, cur, 0, seen)
    for n, hop in enumerate(plan.hops, start=1):
        cur = hop.run(cur)
        act = f"store:op-{hop.operation.op_id}"
        if act not in seen:
            seen.add(act)
            doc.activity(
                act,
                None,
                hop.operation.created_at,
                {"prov:type": _qn(doc, "dslog:Operation"), "prov:label": hop.operation.op_name},
            )
        sel = _add_selection(doc, hop.dst, cur, n, seen)
        # backward: the hop's source holds outputs of the operation, derived from ``sel``
        doc.wasDerivedFrom(
            prev if hop.direction == "backward" else sel,
            sel if hop.direction == "backward" else prev,
            act,
            other_attributes={"dslog:direction": hop.direction},
        )
        prev = sel
    return doc


def _add_selection(
    doc: "ProvBundle", a: ArrayRecord, cells: CellSet, n: int, seen: set[str]
) -> str:
    arr = _add_array(doc, a, seen)
    sel = f"store:selection-{n}"
    doc.entity(
        sel,
        [
            ("prov:type", _qn(doc, "dslog:CellSelection")),
            ("prov:type", _qn(doc, "prov:Collection")),
            ("prov:label", f"{cells.count():,} cell(s) of {a.name}"),
            ("dslog:cellCount", cells.count()),
            ("dslog:boxes", str(cells)),
        ],
    )
    doc.specializationOf(sel, arr)
    lo, hi = cells.lo, cells.hi
    for b in range(cells.n_boxes):
        box = f"{sel}-box-{b}"
        spelled = ", ".join(spell_span(int(lo[b, j]), int(hi[b, j])) for j in range(lo.shape[1]))
        doc.entity(box, {"prov:type": _qn(doc, "dslog:CellBox"), "dslog:box": spelled})
        doc.hadMember(sel, box)
    return sel


def lineage_tables(doc: "ProvDocument") -> dict[TableKey, LineageTable]:
    """The lineage tables an :func:`asset_document` holds, rebuilt exactly from its
    ``dslog:row`` attributes (a document read back from PROV-JSON gives the same tables).

    Raises:
        ExportError: a derivation's ``dslog:row`` is not one dslog wrote.
    """
    pm = _prov()
    rows: dict[tuple[str, int], list[list[list[int]]]] = {}
    shapes: dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], int]] = {}
    names: dict[tuple[str, int], tuple[str, str]] = {}
    members: dict[str, str] = {}
    labels: dict[str, str] = {}
    for rec in doc.get_records(pm.ProvMembership):
        args = dict(rec.formal_attributes)
        members[str(args[pm.PROV_ATTR_ENTITY])] = str(args[pm.PROV_ATTR_COLLECTION])
    for rec in doc.get_records(pm.ProvEntity):
        name = _attr(rec, "name")
        if name is not None:
            labels[str(rec.identifier)] = name
    for rec in doc.get_records(pm.ProvDerivation):
        row = _attr(rec, "row")
        if row is None:
            continue
        args = dict(rec.formal_attributes)
        act = str(args[pm.PROV_ATTR_ACTIVITY])
        table = int(_attr(rec, "table") or 0)
        op_id = act.split(":op-", 1)[-1]
        key = (op_id, table)
        try:
            fields = json.loads(row)
            shapes[key] = (
                tuple(int(d) for d in json.loads(_attr(rec, "outShape") or "")),
                tuple(int(d) for d in json.loads(_attr(rec, "inShape") or "")),
                int(_attr(rec, "tablePairs") or ""),
            )
        except (json.JSONDecodeError, TypeError, ValueError) as e:
            msg = f"The derivation `{rec.identifier}` has a `dslog:row` dslog cannot read: {e}."
            raise ExportError(msg) from e
        out_q = members.get(str(args[pm.PROV_ATTR_GENERATED_ENTITY]), "")
        in_q = members.get(str(args[pm.PROV_ATTR_USED_ENTITY]), "")
        names[key] = (labels.get(out_q, out_q), labels.get(in_q, in_q))
        rows.setdefault(key, []).append(fields)
    out: dict[TableKey, LineageTable] = {}
    for key, rs in rows.items():
        out_shape, in_shape, n_pairs = shapes[key]
        cols = [
            np.array([r[f] for r in rs], dtype=np.int64)
            .reshape(len(rs), len(out_shape) if f < 2 else len(in_shape))
            .T.copy()
            for f in range(len(PROVRC_FIELDS))
        ]
        out[TableKey(key[0], *names[key])] = LineageTable.from_fields(
            out_shape, in_shape, len(rs), n_pairs, cols
        )
    return out


def _attr(rec: Any, local: str) -> str | None:
    for k, v in rec.extra_attributes:
        ns = getattr(k, "namespace", None)
        if ns is not None and ns.uri == DSLOG_NS and k.localpart == local:
            return str(v)
    return None


def to_text(doc: "ProvDocument", format: Format = "json") -> str:
    """``doc`` as PROV-JSON (``"json"``) or PROV-N (``"provn"``).

    Raises:
        ExportError: another format.
    """
    if format == "json":
        return str(doc.serialize(format="json", indent=1))
    if format == "provn":
        return str(doc.get_provn())
    msg = f'PROV formats are "json" and "provn", not {format!r}.'
    raise ExportError(msg)
