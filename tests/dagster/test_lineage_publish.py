"""How the IO manager publishes a tracked step's lineage: staged (and flushed) while the value
is written, published only after the value is written, durable before the step succeeds, the
value's version named only after the lineage is published, and nothing visible when either
half fails."""

import os
import threading
import time
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.store import files as files_module
from dslog_dagster.core.store import layout as layout_module
from dslog_dagster.errors import LineageStorageError
from dslog_dagster.io_managers import lineage_io_manager as lio
from dslog_dagster.io_managers import metadata as m


@tracked_asset
def base() -> np.ndarray:
    return np.arange(20.0).reshape(4, 5)


@tracked_asset
def shifted(base: np.ndarray) -> np.ndarray:
    return base[:, 1:] + 1.0


def _ops_of(store_dir: str, name: str) -> list[Any]:
    return [op for op in DSLog(store_dir).store.operations() if op.outputs[0].name == name]


def _staged(store_dir: str) -> list[str]:
    staging = Path(store_dir) / ".staging"
    return sorted(os.listdir(staging)) if staging.exists() else []


def _shifted_fails_on_lineage(
    instance: dg.DagsterInstance, io: DSLogIOManager, message: str
) -> None:
    """Materializing ``shifted`` alone fails loudly with a ``LineageStorageError`` carrying
    ``message`` and records no materialization."""
    res = dg.materialize(
        [base, shifted],
        selection=[shifted],
        instance=instance,
        resources={"io_manager": io},
        raise_on_error=False,
    )
    assert not res.success
    err = str(res.get_step_failure_events()[0].step_failure_data.error)
    assert LineageStorageError.__name__ in err
    assert message in err
    assert res.get_asset_materialization_events() == []


def test_served_step_is_published_after_its_value_and_flushed_before_success(
    instance: dg.DagsterInstance,
    io: DSLogIOManager,
    store_dir: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for _ in range(4):  # captures confirm a view; then the step is served
        res = dg.materialize([base, shifted], instance=instance, resources={"io_manager": io})
    md = {k: v.value for k, v in res.asset_materializations_for_node("shifted")[0].metadata.items()}
    assert md[m.OBTAINED] in ("base", "dim", "gen")
    # the next served run, with every publishing system call logged in order
    events: list[tuple[str, str]] = []
    real = {n: getattr(os, n) for n in ("fsync", "replace", "rename", "link")}

    def logged(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = real[name](*args, **kwargs)
            target = args[0] if name == "fsync" else args[1]
            if name == "fsync":
                target = os.readlink(f"/proc/self/fd/{target}")
            events.append((name, str(target)))
            return out

        return call

    for name in real:
        monkeypatch.setattr(os, name, logged(name))
    res = dg.materialize([base, shifted], instance=instance, resources={"io_manager": io})
    for name, fn in real.items():
        monkeypatch.setattr(os, name, fn)
    md = {k: v.value for k, v in res.asset_materializations_for_node("shifted")[0].metadata.items()}
    assert md[m.OBTAINED] in ("base", "dim", "gen")
    op = DSLog(store_dir).store.get_operation(md[m.OP_ID])
    assert op.outputs[0].version == res.run_id
    segment = str(Path(store_dir, "operations", f"{op.op_id}.parquet"))
    array_dir = str(Path(store_dir, "arrays", layout_module.array_dir_name("shifted")))
    version = str(Path(io.base_dir or "", "shifted.versions", f"{res.run_id}.npy"))
    value = events.index(("replace", version))
    published = events.index(("rename", segment))
    assert published < value  # the value is named as its version only after the lineage
    link = next(
        i for i, (n, t) in enumerate(events) if n == "replace" and t.endswith("/shifted.npy")
    )
    assert value < link  # the convenience link follows the named version
    staged = next(i for i, (n, t) in enumerate(events) if n == "rename" and t == segment)
    # the segment was flushed under .staging before it was published ...
    flushed = [t for n, t in events[:staged] if n == "fsync" and "/.staging/" in t]
    assert flushed
    # ... and both directories it appears in were flushed after (before the step succeeded)
    after = {t for n, t in events[published:] if n == "fsync"}
    assert {str(Path(store_dir, "operations")), array_dir} <= after
    assert ("link", str(Path(array_dir, layout_module.link_file_name(res.run_id)))) in events
    assert _staged(store_dir) == []


def test_a_value_that_cannot_be_stored_publishes_no_lineage(
    instance: dg.DagsterInstance,
    io: DSLogIOManager,
    store_dir: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dg.materialize([base, shifted], instance=instance, resources={"io_manager": io})
    real_save = np.save

    def failing(f: Any, arr: np.ndarray, **kwargs: Any) -> None:
        if arr.shape == (4, 4):  # the value of `shifted`
            msg = "disk full"
            raise OSError(msg)
        real_save(f, arr, **kwargs)

    monkeypatch.setattr(lio.np, "save", failing)
    res = dg.materialize(
        [base, shifted], instance=instance, resources={"io_manager": io}, raise_on_error=False
    )
    assert not res.success
    assert "disk full" in str(res.get_step_failure_events()[0].step_failure_data.error)
    # the staged segment was dropped: no operation, no array version of the failed run
    assert res.run_id not in [op.outputs[0].version for op in _ops_of(store_dir, "shifted")]
    versions = {(a.name, a.version) for a in DSLog(store_dir).store.arrays()}
    assert ("base", res.run_id) in versions  # the upstream step of the run was stored
    assert ("shifted", res.run_id) not in versions
    assert _staged(store_dir) == []


def test_a_failure_staging_the_lineage_fails_the_step_loudly(
    instance: dg.DagsterInstance,
    io: DSLogIOManager,
    store_dir: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dg.materialize([base], instance=instance, resources={"io_manager": io})
    real_write = files_module.write_synced

    def failing(path: Path, data: bytes, durable: bool = True) -> None:
        if "/.staging/" in str(path):  # the operation's segment (staged in the thread)
            msg = "no space left on device"
            raise OSError(msg)
        real_write(path, data, durable)

    monkeypatch.setattr(files_module, "write_synced", failing)
    _shifted_fails_on_lineage(instance, io, "no space left on device")
    assert _ops_of(store_dir, "shifted") == []
    assert _staged(store_dir) == []


def test_the_directory_flush_runs_aside_but_ends_before_the_output_is_handled(
    instance: dg.DagsterInstance,
    io: DSLogIOManager,
    store_dir: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The directories are flushed in a worker while the metadata is built; a slow flush
    must still be over when ``handle_output`` returns (Dagster then reports success)."""
    for _ in range(4):  # served from a view from here on
        dg.materialize([base, shifted], instance=instance, resources={"io_manager": io})
    real_flush = files_module.fsync_dir
    flushes: list[tuple[str, bool]] = []  # (thread, finished)
    ops_flushed_by: list[str] = []

    def slow_flush(path: Any) -> None:
        flushes.append((threading.current_thread().name, False))
        if Path(path) == Path(store_dir, "operations"):
            ops_flushed_by.append(threading.current_thread().name)
        time.sleep(0.2)  # slower than building the metadata: a missing wait would show
        real_flush(path)
        flushes.append((threading.current_thread().name, True))

    monkeypatch.setattr(files_module, "fsync_dir", slow_flush)
    handled: list[bool] = []
    real_handle = DSLogIOManager.handle_output

    def handle(self: DSLogIOManager, context: dg.OutputContext, obj: Any) -> None:
        real_handle(self, context, obj)
        if context.step_key == "shifted":
            # the directories (operations/ and the array's) were flushed, and every flush
            # that began is over
            begun = sum(1 for _, done in flushes if not done)
            handled.append(begun >= 2 and begun == sum(1 for _, done in flushes if done))

    monkeypatch.setattr(DSLogIOManager, "handle_output", handle)
    res = dg.materialize([base, shifted], instance=instance, resources={"io_manager": io})
    md = {k: v.value for k, v in res.asset_materializations_for_node("shifted")[0].metadata.items()}
    assert md[m.OBTAINED] in ("base", "dim", "gen")
    assert handled == [True]
    assert len(ops_flushed_by) == 1
    assert ops_flushed_by[0].startswith("dslog-io")  # aside, not in the step's thread


def test_a_failing_directory_flush_fails_the_step_loudly(
    instance: dg.DagsterInstance,
    io: DSLogIOManager,
    store_dir: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dg.materialize([base], instance=instance, resources={"io_manager": io})

    def failing(path: Any) -> None:
        msg = "I/O error flushing the directory"
        raise OSError(msg)

    monkeypatch.setattr(files_module, "fsync_dir", failing)
    _shifted_fails_on_lineage(instance, io, "I/O error flushing the directory")
