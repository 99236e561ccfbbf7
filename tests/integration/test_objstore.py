"""The lineage store on object storage, against an S3-compatible server on 127.0.0.1.

One moto server (``moto[server]``, a process of its own) serves the whole module; each test
uses buckets of its own. Writers, compactors and readers run in processes of their own, each
with its own cache folder (as on separate machines), so everything they share goes through
the server: answers are compared with the same work on a local store.
"""

import json
import os
import runpy
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from spark.servers import s3_server

from dslog_dagster.core import LineageStore
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import (
    ConfigurationError,
    LineageCorruptError,
    LineageStorageError,
    MissingExtraError,
    StorePermissionError,
)

pytestmark = [pytest.mark.objstore, pytest.mark.integration]

PROGRAMS = str(Path(__file__).with_name("objstore_programs.py"))
writes = runpy.run_path(PROGRAMS)["writes"]  # the writers' registrations, run here too
N_WRITERS = 8


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1; the clients find it through the environment."""
    with s3_server() as endpoint:
        yield endpoint


def _bucket(name: str) -> Any:
    client = boto3.client("s3")
    client.create_bucket(Bucket=name)
    return client


def _run(mode: str, *args: str, cache: Path, timeout: float = 60) -> Any:
    env = {**os.environ, "DSLOG_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, PROGRAMS, mode, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None


def _start(mode: str, *args: str, cache: Path) -> "subprocess.Popen[str]":
    env = {**os.environ, "DSLOG_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [sys.executable, PROGRAMS, mode, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: "subprocess.Popen[str]") -> Any:
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_capture_store_query_from_a_fresh_process_equals_a_local_store(
    s3: str, tmp_path: Path
) -> None:
    client = _bucket("pipeline")
    url = "s3://pipeline/team/lineage"
    _run("pipeline", url, cache=tmp_path / "writer-cache")
    _run("pipeline", str(tmp_path / "local"), cache=tmp_path / "unused")
    remote = _run("answers", url, cache=tmp_path / "reader-cache")
    local = _run("answers", str(tmp_path / "local"), cache=tmp_path / "unused")
    assert remote == local
    assert remote["z0->x"] == [[0, 0], [1, 0], [2, 0], [3, 0]]  # z0 <- y[:, 0] <- x[:, 0]
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="pipeline")["Contents"]]
    assert all(k.startswith("team/lineage/") for k in keys)
    assert not any(k.endswith(".duckdb") for k in keys)  # the catalog stays a local cache
    assert (tmp_path / "reader-cache").is_dir()


def test_eight_writers_a_compactor_and_a_reader_lose_and_duplicate_nothing(
    s3: str, tmp_path: Path
) -> None:
    _bucket("busy")
    url = "s3://busy/store"
    LineageStore(url, cache_dir=tmp_path / "setup")  # the store id, once
    go, stop = str(tmp_path / "go"), str(tmp_path / "stop")
    writers = [
        _start("writer", url, str(w), go, cache=tmp_path / f"w{w}") for w in range(N_WRITERS)
    ]
    deadline = time.monotonic() + 60
    while not all(Path(f"{go}.ready-{w}").exists() for w in range(N_WRITERS)):
        assert all(p.poll() is None for p in writers), [p.communicate() for p in writers]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    compactor = _start("compactor", url, stop, cache=tmp_path / "compactor")
    reader = _start("reader", url, stop, cache=tmp_path / "reader")
    Path(go).touch()
    written = [op for p in writers for op in _finish(p)]
    Path(stop).touch()
    packs = _finish(compactor)
    seen = _finish(reader)
    assert len(written) == len(set(written)) == N_WRITERS * 5
    assert packs > 0  # the compactor packed while writers wrote
    # a fresh reader: every operation exactly once, every table as registered
    store = LineageStore(url, cache_dir=tmp_path / "final")
    ops = store.operations("mix")
    assert sorted(o.op_id for o in ops) == sorted(written)
    assert seen["rounds"] >= 1
    assert sorted(map(tuple, seen["ops"])) == sorted(
        (o.args["worker"], o.args["k"], o.args["hash"]) for o in ops
    )
    # the same registrations on a local store answer the same
    mine = LineageStore(tmp_path / "local")
    for w in range(N_WRITERS):
        writes(mine, w)
    local = {(o.args["worker"], o.args["k"]): o for o in mine.operations("mix")}
    assert sorted(local) == sorted((o.args["worker"], o.args["k"]) for o in ops)
    for op in ops:
        ref = local[op.args["worker"], op.args["k"]]
        assert op.args == ref.args
        a = store.read_lineage(op, op.outputs[0].name, "shared").decompress()
        b = mine.read_lineage(ref, ref.outputs[0].name, "shared").decompress()
        assert a == b


def _segment_keys(client: Any, bucket: str, prefix: str) -> list[str]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/operations/")
    return [o["Key"] for o in listed.get("Contents", ())]


def test_a_damaged_object_is_refused_naming_its_url(s3: str, tmp_path: Path) -> None:
    client = _bucket("damaged")
    url = "s3://damaged/s"
    _run("pipeline", url, cache=tmp_path / "w")
    key = _segment_keys(client, "damaged", "s")[0]
    data = bytearray(client.get_object(Bucket="damaged", Key=key)["Body"].read())
    data[len(data) // 2] ^= 0xFF
    client.put_object(Bucket="damaged", Key=key, Body=bytes(data))
    with pytest.raises(LineageCorruptError, match="damaged") as info:
        DSLog(LineageStore(url, cache_dir=tmp_path / "fresh")).prov_query(["z", "x"], np.s_[0])
    assert info.value.path == f"s3://damaged/{key}"
    assert f"s3://damaged/{key}" in str(info.value)


def test_a_missing_object_is_detected_never_a_smaller_answer(s3: str, tmp_path: Path) -> None:
    client = _bucket("missing")
    url = "s3://missing/s"
    _run("pipeline", url, cache=tmp_path / "w")
    held = LineageStore(url, cache_dir=tmp_path / "held")  # a cache holding every object
    assert len(held.operations()) == 2
    key = _segment_keys(client, "missing", "s")[-1]
    client.delete_object(Bucket="missing", Key=key)
    # a reader whose cache holds the object the service lost
    with pytest.raises(LineageCorruptError, match="missing") as info:
        held.sync()
    assert info.value.path == f"s3://missing/{key}"
    # a fresh reader: the array record naming the operation shows it is gone
    with pytest.raises(LineageCorruptError, match="in no segment"):
        LineageStore(url, cache_dir=tmp_path / "fresh")


def test_compaction_retires_segments_a_stale_reader_still_answers(s3: str, tmp_path: Path) -> None:
    client = _bucket("compact")
    url = "s3://compact/s"
    _run("pipeline", url, cache=tmp_path / "w")
    stale = LineageStore(url, cache_dir=tmp_path / "stale")
    before = DSLog(stale).prov_query(["z", "y", "x"], np.s_[2]).to_indices().tolist()
    # a grace period: the replaced segments stay until it passes
    kept = LineageStore(url, cache_dir=tmp_path / "c1")
    result = kept.compact()
    assert result.packs
    assert len(result.removed) == 2
    assert len(_segment_keys(client, "compact", "s")) == 2
    compactor = LineageStore(url, cache_dir=tmp_path / "c2", storage_options={"retire_after_s": 0})
    compactor.compact()
    assert _segment_keys(client, "compact", "s") == []
    stale.sync()  # its copies of the retired segments go; the pack comes
    after = DSLog(stale).prov_query(["z", "y", "x"], np.s_[2]).to_indices().tolist()
    assert after == before
    assert sorted(o.op_name for o in stale.operations()) == ["make_y", "make_z"]
    # a pack a retirement names, lost: detected
    pack = result.packs[0]
    client.delete_object(Bucket="compact", Key=f"s/{pack}")
    with pytest.raises(LineageCorruptError, match="missing"):
        LineageStore(url, cache_dir=tmp_path / "fresh")


def test_unknown_scheme_and_missing_extra_say_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match=r"unknown scheme `ftp://`"):
        LineageStore("ftp://host/store", cache_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="names no bucket"):
        LineageStore("s3:///store", cache_dir=tmp_path)
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'dslog-dagster\[s3\]'"):
        LineageStore("s3://bucket/store", cache_dir=tmp_path)


def test_missing_bucket_and_credentials_say_what_to_do(
    s3: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(LineageStorageError, match=r"bucket `nowhere` does not exist.*aws s3 mb"):
        LineageStore("s3://nowhere/store", cache_dir=tmp_path)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(StorePermissionError, match="no credentials found"):
        LineageStore("s3://nowhere/store", cache_dir=tmp_path)


def test_refused_credentials_say_what_to_do(tmp_path: Path) -> None:
    from botocore.stub import Stubber

    from dslog_dagster.core.store.object_backends import S3Objects

    objects = S3Objects("s3://b/p", "b", "p", {"endpoint_url": "http://127.0.0.1:9"})
    with Stubber(objects.client) as stub:
        stub.add_client_error("get_object", "InvalidAccessKeyId", "no such key id", 403)
        with pytest.raises(StorePermissionError, match="refused the credentials"):
            objects.get(".store-id")


def test_any_fsspec_file_system_holds_a_store(tmp_path: Path) -> None:
    """The generic backend (checked creates), on fsspec's in-memory file system."""
    url = "memory://bucket/lineage"
    store = LineageStore(url, cache_dir=tmp_path / "a")
    x = store.register_array("x", (3,))
    y = store.register_array("y", (3,))
    from dslog_dagster.core import LineageRelation

    rel = LineageRelation.from_pairs((3,), (3,), [[0], [1]], [[1], [2]])
    store.register_operation("shift", [x], [y], {("y", "x"): rel})
    other = LineageStore(url, cache_dir=tmp_path / "b")
    assert DSLog(other).prov_query(["y", "x"], np.s_[0:2]).to_indices().tolist() == [[1], [2]]
    assert other.store_id == store.store_id


def test_dslog_resource_on_s3_in_a_dagster_run(s3: str, tmp_path: Path) -> None:
    import dagster as dg

    from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset

    @tracked_asset
    def image() -> np.ndarray:
        return np.arange(12.0).reshape(3, 4)

    @tracked_asset(code_version="1")
    def smoothed(image: np.ndarray) -> np.ndarray:
        return (image[:-1] + image[1:]) / 2

    _bucket("dagster")
    dslog = DSLogResource(store_dir="s3://dagster/lineage")
    io = DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "data"))
    defs = dg.Definitions(assets=[image, smoothed], resources={"io_manager": io, "dslog": dslog})
    os.environ["DSLOG_CACHE_DIR"] = str(tmp_path / "run-cache")
    try:
        with dg.instance_for_test() as instance:
            job = defs.resolve_implicit_global_asset_job_def()
            result = job.execute_in_process(instance=instance)
    finally:
        del os.environ["DSLOG_CACHE_DIR"]
    assert result.success
    fresh = LineageStore("s3://dagster/lineage", cache_dir=tmp_path / "query")
    cells = DSLog(fresh).prov_query(["smoothed", "image"], np.s_[1, 3])
    assert cells.to_indices().tolist() == [[1, 3], [2, 3]]
