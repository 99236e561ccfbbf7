"""OpenLineage run events of one materialization, built with the ``openlineage-python`` client.

A tracked asset's materialization is one OpenLineage run of the job named by the asset key:
``START``, then ``COMPLETE`` (or ``FAIL``) carrying the input and output datasets, the output's
``schema`` and ``columnLineage`` facets (:mod:`.openlineage_facet` says how the fields and
transformations are read off the stored lineage). Events are the client's own classes, so its
transports send them; :func:`event_json` gives their JSON. The client is the ``[openlineage]``
extra, imported through :func:`dslog_dagster.extras.require`.
"""

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.store import LineageStore, OperationRecord
from dslog_dagster.core.store.records import ArrayRecord
from dslog_dagster.export.openlineage_facet import FieldMap, edges
from dslog_dagster.extras import require

__all__ = [
    "DEFAULT_NAMESPACE",
    "PRODUCER",
    "Materialization",
    "dataset_name",
    "event_json",
    "run_events",
    "stored_events",
]

DEFAULT_NAMESPACE = "dslog"
"""The namespace of jobs and datasets unless configured."""
PRODUCER = "https://github.com/dslog/dslog-dagster"
"""The ``producer`` URI of every event."""
FEATURE = "OpenLineage export"


@dataclass(frozen=True, slots=True)
class Materialization:
    """What one materialization's events describe.

    Attributes:
        op: the registered operation (``None``: a source step, or the step failed before
            registering one); ``output``: its output array.
        inputs: the input arrays (op inputs when ``op`` is set).
        relations: the stored relation per ``(output name, input name)``.
        considered: the relations are the considered ones (``mode="considered"``).
        direct: a frame capture's contributing column lineage keyed by input array name.
        run_key: what identifies the run (a Dagster run id and step; its UUID is derived).
        started / ended: the run's times; ``error``: the failure of a ``FAIL`` event.
        contributing: with ``considered``, the contributing relations when the capture handed
            them over (:attr:`~dslog_dagster.tracked_step.PendingLineage.contributing`).
    """

    output: ArrayRecord | None
    job: str
    op: OperationRecord | None
    relations: Mapping[tuple[str, str], LineageRelation | LineageTable]
    considered: bool
    direct: Mapping[str, Mapping[str, Sequence[str]]] | None
    run_key: str
    started: datetime
    ended: datetime
    error: str | None = None
    contributing: Mapping[tuple[str, str], LineageRelation | LineageTable] | None = None


def dataset_name(rec: ArrayRecord) -> str:
    """An array's dataset name: its asset key when it is an asset, else its name."""
    return rec.asset_key or rec.name


def _fields(rec: ArrayRecord) -> FieldMap:
    cols = None if rec.columns is None else [c for c, _ in rec.columns]
    return FieldMap.of(dataset_name(rec), rec.shape, cols)


def _schema(ol: Any, rec: ArrayRecord) -> Any:
    fmap = _fields(rec)
    types = dict(rec.columns) if rec.columns is not None else {}
    return ol.schema_dataset.SchemaDatasetFacet(
        fields=[
            ol.schema_dataset.SchemaDatasetFacetFields(name=f, type=types.get(f, rec.dtype))
            for f in fmap.fields
        ]
    )


def _column_lineage(ol: Any, m: Materialization, namespace: str) -> Any:
    assert m.op is not None
    assert m.output is not None
    out = m.output
    inputs = {dataset_name(i): _fields(i) for i in m.op.inputs}
    rels = {dataset_name(i): m.relations[(out.name, i.name)] for i in m.op.inputs
            if (out.name, i.name) in m.relations}  # fmt: skip
    by_name = {i.name: dataset_name(i) for i in m.op.inputs}
    direct = None if m.direct is None else {
        o: {by_name[n]: list(cols) for n, cols in ins.items() if n in by_name}
        for o, ins in m.direct.items()
    }  # fmt: skip
    found = edges(
        _fields(out),
        inputs,
        rels,
        considered=m.considered,
        direct=direct,
        effects=m.op.effects,
        contributing=None if m.contributing is None else {
            dataset_name(i): m.contributing[(out.name, i.name)] for i in m.op.inputs
            if (out.name, i.name) in m.contributing
        },
    )  # fmt: skip
    cl = ol.column_lineage_dataset
    fields = {
        o: cl.Fields(
            inputFields=[
                cl.InputField(
                    namespace=namespace,
                    name=e.input,
                    field=e.field,
                    transformations=[
                        cl.Transformation(type=e.type, subtype=e.subtype, description=e.description)
                    ],
                )
                for e in es
            ]
        )
        for o, es in found.items()
    }
    return cl.ColumnLineageDatasetFacet(fields=fields)


def run_events(m: Materialization, *, namespace: str = DEFAULT_NAMESPACE) -> list[Any]:
    """The ``START`` and ``COMPLETE`` events of a materialization (``FAIL`` instead of
    ``COMPLETE`` when ``m.error`` is set), as ``openlineage.client.event_v2.RunEvent``.

    Raises:
        MissingExtraError: ``openlineage-python`` is not installed.
    """
    ev = require("openlineage.client.event_v2", FEATURE)
    ol = require("openlineage.client.facet_v2", FEATURE)
    run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"dslog:{m.run_key}"))
    run = ev.Run(runId=run_id)
    job = ev.Job(namespace=namespace, name=m.job)
    ins = [
        ev.InputDataset(
            namespace=namespace, name=dataset_name(i), facets={"schema": _schema(ol, i)}
        )
        for i in (() if m.op is None else m.op.inputs)
    ]
    outs = []
    if m.output is not None:
        facets: dict[str, Any] = {"schema": _schema(ol, m.output)}
        if m.op is not None and m.error is None:
            facets["columnLineage"] = _column_lineage(ol, m, namespace)
        outs.append(
            ev.OutputDataset(namespace=namespace, name=dataset_name(m.output), facets=facets)
        )
    start = ev.RunEvent(
        eventType=ev.RunState.START,
        eventTime=m.started.isoformat(),
        run=run,
        job=job,
        producer=PRODUCER,
        inputs=ins,
        outputs=[],
    )
    end_run = run
    if m.error is not None:
        err = ol.error_message_run.ErrorMessageRunFacet(
            message=m.error, programmingLanguage="python"
        )
        end_run = ev.Run(runId=run_id, facets={"errorMessage": err})
    end = ev.RunEvent(
        eventType=ev.RunState.FAIL if m.error is not None else ev.RunState.COMPLETE,
        eventTime=m.ended.isoformat(),
        run=end_run,
        job=job,
        producer=PRODUCER,
        inputs=ins,
        outputs=outs,
    )
    return [start, end]


def event_json(event: Any) -> dict[str, Any]:
    """An event as its JSON object (the client's serializer)."""
    serde = require("openlineage.client.serde", FEATURE)
    out: dict[str, Any] = serde.Serde.to_dict(event)
    return out


def stored_events(
    store: LineageStore,
    array: str,
    *,
    version: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
) -> list[Any]:
    """The events of a stored array version's materialization, read back from the store (the
    ``dslog export openlineage`` command). The store keeps one relation per step: a step stored
    in considered mode keeps no contributing column lineage to split it by, so every stored pair
    reads ``DIRECT`` here, like a NumPy step's; the events emitted at materialization
    (:mod:`.openlineage_emit`) have the capture's split and carry the ``INDIRECT`` fields.

    Raises:
        LineageNotFoundError: no such array or version.
        MissingExtraError: ``openlineage-python`` is not installed.
    """
    rec = store.get_array(array, version)
    op_ids = store.catalog.column(
        "SELECT DISTINCT op_id FROM operation_arrays WHERE role = 'output' AND array_id = ? "
        "ORDER BY op_id",
        [rec.array_id],
    )
    op = store.get_operation(str(op_ids[-1])) if op_ids else None
    relations: dict[tuple[str, str], LineageRelation | LineageTable] = {}
    if op is not None:
        for t in op.tables:
            if t.output == rec.name:
                relations[(t.output, t.input)] = store.read_lineage(
                    op, t.output, t.input
                ).as_provrc()
    when = op.created_at if op is not None else rec.created_at
    m = Materialization(
        output=rec,
        job=dataset_name(rec),
        op=op,
        relations=relations,
        considered=False,
        direct=None,
        run_key=f"{rec.array_id}",
        started=when,
        ended=when,
    )
    return run_events(m, namespace=namespace)
