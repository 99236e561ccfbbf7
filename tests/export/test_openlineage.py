"""OpenLineage run events of tracked materializations, checked against the OpenLineage schemas.

The events are validated with ``jsonschema`` against the run event schema and the
ColumnLineageDatasetFacet schema vendored under ``openlineage_spec/`` (see its NOTE.md;
``tests/openlineage_check.py``). A
loopback HTTP server (127.0.0.1, ephemeral port) receives the events of a real Dagster
materialization: a pandas asset with a join and a group-by, in considered mode so the facet has
both DIRECT and INDIRECT fields, compared with a facet derived by hand. The file transport is
checked against ``dslog export openlineage`` on a NumPy asset (dataset-level lineage), and a
closed port leaves the materialization successful with a warning.
"""

import json
import socket
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd
import pytest
from openlineage_check import facet, receiver, validate

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.cli import main
from dslog_dagster.io_managers import metadata as m

ORDERS = pd.DataFrame({"cust": [1, 1, 2, 3], "amount": [10.0, 20.0, 5.0, 7.0]})
CUSTOMERS = pd.DataFrame({"cust": [1, 2, 3], "region": ["north", "south", "north"]})


@tracked_asset
def orders() -> pd.DataFrame:
    return ORDERS.copy()


@tracked_asset
def customers() -> pd.DataFrame:
    return CUSTOMERS.copy()


@tracked_asset(mode="considered")
def region_totals(orders: pd.DataFrame, customers: pd.DataFrame) -> pd.DataFrame:
    joined = orders.merge(customers, on="cust")
    return joined.groupby("region", as_index=False)["amount"].sum()


@tracked_asset
def raw() -> np.ndarray:
    return np.arange(12.0).reshape(3, 4)


@tracked_asset
def row_sums(raw: np.ndarray) -> np.ndarray:
    return raw.sum(axis=1)


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    with receiver() as srv:
        yield srv


def test_http_transport_receives_valid_events_with_column_lineage(
    tmp_path: Path, server: ThreadingHTTPServer
) -> None:
    host, port = server.server_address[:2]
    dslog = DSLogResource(
        store_dir=str(tmp_path / "store"),
        openlineage={"transport": "http", "url": f"http://{host}:{port}", "api_key": "k3y"},
    )
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [orders, customers, region_totals],
            resources={"io_manager": io, "dslog": dslog},
            instance=instance,
        )
        assert res.success
        md = res.asset_materializations_for_node("region_totals")[0].metadata
    assert md[m.OPENLINEAGE].value == "2 events sent"
    got = server.received  # type: ignore[attr-defined]
    assert {r["path"] for r in got} == {"/api/v1/lineage"}
    assert {r["auth"] for r in got} == {"Bearer k3y"}
    events = [r["event"] for r in got]
    for e in events:
        validate(e)
    by_job: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_job.setdefault(e["job"]["name"], []).append(e)
    assert sorted(by_job) == ["customers", "orders", "region_totals"]
    start, complete = sorted(by_job["region_totals"], key=lambda e: e["eventType"] != "START")
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert sorted(d["name"] for d in complete["inputs"]) == ["customers", "orders"]
    # By hand: amount of `north` = the sum of orders.amount of orders 0, 1 and 3 (several
    # cells: AGGREGATION); region `north` = the key of its group, contributed by the region
    # cells of every customer in it (customers 0 and 2: several cells, so AGGREGATION too).
    # Considered only: which orders join which customer (the `cust` keys of both sides) and,
    # for amount, which group a row falls in (customers.region). The operation ran a join and
    # a group-by, and which of them decided a cell is not recorded: no subtype.
    assert facet(complete) == {
        "region": [
            ("customers", "cust", "INDIRECT", None),
            ("customers", "region", "DIRECT", "AGGREGATION"),
            ("orders", "cust", "INDIRECT", None),
        ],
        "amount": [
            ("customers", "cust", "INDIRECT", None),
            ("customers", "region", "INDIRECT", None),
            ("orders", "amount", "DIRECT", "AGGREGATION"),
            ("orders", "cust", "INDIRECT", None),
        ],
    }


def test_file_transport_writes_the_events_dslog_export_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = tmp_path / "events.jsonl"
    store = tmp_path / "store"
    dslog = DSLogResource(
        store_dir=str(store), openlineage={"transport": "file", "path": str(lines)}
    )
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [raw, row_sums], resources={"io_manager": io, "dslog": dslog}, instance=instance
        )
        assert res.success
    events = [json.loads(x) for x in lines.read_text(encoding="utf-8").splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"] * 2
    for e in events:
        validate(e)
    # a NumPy array is one field, the array: row_sums adds up each row of raw
    assert facet(events[3]) == {"row_sums": [("raw", "raw", "DIRECT", "AGGREGATION")]}
    # the command writes the same facet from the store
    assert main(["export", "openlineage", str(store), "row_sums"]) == 0
    exported = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [e["eventType"] for e in exported] == ["START", "COMPLETE"]
    for e in exported:
        validate(e)
    assert facet(exported[1]) == facet(events[3])


def test_a_closed_port_leaves_the_materialization_successful_with_a_warning(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dslog = DSLogResource(
        store_dir=str(tmp_path / "store"),
        openlineage={"transport": "http", "url": f"http://127.0.0.1:{port}", "timeout": 1.0},
    )
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    with dg.instance_for_test() as instance:
        # one step (a source asset sends its events too): the test is about the transport
        res = dg.materialize([raw], resources={"io_manager": io, "dslog": dslog}, instance=instance)
        assert res.success
        md = res.asset_materializations_for_node("raw")[0].metadata
        logs = [
            r.user_message
            for r in instance.all_logs(res.run_id)
            if r.level >= 30 and "OpenLineage" in r.user_message
        ]
    assert md[m.OPENLINEAGE].value.startswith("0 of 2 events sent: ")
    assert any("were not sent to" in msg and str(port) in msg for msg in logs)
    assert np.array_equal(res.output_for_node("raw"), np.arange(12.0).reshape(3, 4))


def test_a_failed_materialization_ends_with_a_valid_fail_event(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from dslog_dagster.core.store import LineageStore
    from dslog_dagster.export import Materialization, event_json, run_events

    out = LineageStore(tmp_path / "store").register_array(
        "t", (2, 2), "float64", asset_key="sales/t", columns=[("a", "int64"), ("b", "str")]
    )
    when = datetime(2026, 11, 28, tzinfo=UTC)
    mat = Materialization(
        output=out, job="sales/t", op=None, relations={}, considered=False, direct=None,
        run_key="r1/sales/t", started=when, ended=when, error="OSError: disk full",
    )  # fmt: skip
    start, fail = (event_json(e) for e in run_events(mat, namespace="prod"))
    for e in (start, fail):
        validate(e)
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert fail["run"]["facets"]["errorMessage"]["message"] == "OSError: disk full"
    (ds,) = fail["outputs"]
    assert (ds["namespace"], ds["name"]) == ("prod", "sales/t")
    assert "columnLineage" not in ds["facets"]
    assert [f["name"] for f in ds["facets"]["schema"]["fields"]] == ["a", "b"]
