"""Checking OpenLineage run events: the vendored schemas (``export/openlineage_spec``, see its
NOTE.md), a loopback HTTP receiver, and the column-lineage facet as sorted tuples. Shared by
``tests/export/test_openlineage.py`` (pandas and NumPy assets) and
``tests/spark/test_openlineage_spark.py`` (a Spark asset)."""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

SPEC = Path(__file__).parent / "export" / "openlineage_spec"
RUN_EVENT = json.loads((SPEC / "OpenLineage.json").read_text(encoding="utf-8"))
FACET = json.loads((SPEC / "ColumnLineageDatasetFacet.json").read_text(encoding="utf-8"))
REGISTRY: Registry = Registry().with_resources(  # type: ignore[type-arg]
    [(s["$id"], Resource.from_contents(s)) for s in (RUN_EVENT, FACET)]
)

Facet = dict[str, list[tuple[str, str, str, str | None]]]


def validate(event: dict[str, Any]) -> None:
    """The event against the run event schema, and each columnLineage facet against its own."""
    jsonschema.Draft202012Validator(RUN_EVENT, registry=REGISTRY).validate(event)
    for ds in event.get("outputs", []):
        facet = ds.get("facets", {}).get("columnLineage")
        if facet is not None:
            jsonschema.Draft202012Validator(FACET, registry=REGISTRY).validate(
                {"columnLineage": facet}
            )


class _Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append(  # type: ignore[attr-defined]
            {
                "path": self.path,
                "auth": self.headers.get("Authorization"),
                "event": json.loads(body),
            }
        )
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def receiver() -> Iterator[ThreadingHTTPServer]:
    """An HTTP server on 127.0.0.1 (ephemeral port) keeping every POST in ``.received``."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    srv.received = []  # type: ignore[attr-defined]
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def facet(event: dict[str, Any]) -> Facet:
    """The event's one output's column lineage: output field -> sorted (dataset, field,
    type, subtype) of its input fields."""
    (out,) = event["outputs"]
    return {
        o: sorted(
            (f["name"], f["field"], t["type"], t.get("subtype"))
            for f in spec["inputFields"]
            for t in f["transformations"]
        )
        for o, spec in out["facets"]["columnLineage"]["fields"].items()
    }


def events_by_job(server: ThreadingHTTPServer) -> dict[str, list[dict[str, Any]]]:
    """The received events by job name, each job's START first."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in server.received:  # type: ignore[attr-defined]
        out.setdefault(r["event"]["job"]["name"], []).append(r["event"])
    return {k: sorted(v, key=lambda e: e["eventType"] != "START") for k, v in out.items()}
