"""A run with ``group_commit=True``: each step's lineage is published as it ends (readable by
the next step and by other processes), no lineage fsync runs inside a step, and the run's end
flushes every lineage file and directory the run published."""

import os
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.store import group_commit as gc
from dslog_dagster.io_managers import metadata as m


@tracked_asset
def base() -> np.ndarray:
    return np.arange(20.0).reshape(4, 5)


@tracked_asset
def shifted(base: np.ndarray) -> np.ndarray:
    return base[:, 1:] + 1.0


@tracked_asset
def doubled(shifted: np.ndarray) -> np.ndarray:
    return shifted * 2.0


def _published(store_dir: str) -> dict[str, tuple[int, int]]:
    """Every lineage file a reader sees -> its device and inode."""
    out = {}
    for d, _, names in os.walk(store_dir):
        if ".staging" in d:
            continue
        for n in names:
            if n.endswith((".parquet", ".json")):
                s = os.stat(os.path.join(d, n))
                out[os.path.join(d, n)] = (s.st_dev, s.st_ino)
    return out


def test_a_group_committed_run_flushes_at_its_end_not_in_its_steps(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc, "GROUP_COMMIT_DELAY_S", 3600.0)  # only the run's end commits
    store_dir = str(tmp_path / "data" / ".dslog")
    io = DSLogIOManager(base_dir=str(tmp_path / "data"), store_dir=store_dir, group_commit=True)
    events: list[tuple[str, Any]] = []
    real_fsync, real_flush = os.fsync, gc.GroupCommitter.flush

    def fsync(fd: int) -> None:
        s = os.fstat(fd)
        events.append(("fsync", ((s.st_dev, s.st_ino), os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def flush(self: gc.GroupCommitter) -> None:
        events.append(("flush", None))
        real_flush(self)

    @dg.asset
    def reader(doubled: np.ndarray) -> int:
        # inside the run, before its end: another step sees the published lineage at once
        ops = DSLog(store_dir).store.operations()
        events.append(("seen", sorted(op.outputs[0].name for op in ops)))
        return int(doubled.size)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(gc.GroupCommitter, "flush", flush)
    for _ in range(4):  # captures, then steps served from views
        before = _published(store_dir)
        events.clear()
        res = dg.materialize(
            [base, shifted, doubled, reader], instance=instance, resources={"io_manager": io}
        )
        assert res.success
    md = res.asset_materializations_for_node("doubled")[0].metadata
    assert md[m.OBTAINED].value in ("base", "dim", "gen")  # served from a view
    seen = next(v for k, v in events if k == "seen")
    assert {"shifted", "doubled"} <= set(seen)
    first_flush = events.index(("flush", None))
    assert events.index(("seen", seen)) < first_flush
    in_steps = [v for k, v in events[:first_flush] if k == "fsync" and store_dir in v[1]]
    assert in_steps == []  # no lineage fsync on any step's path
    new = {p: i for p, i in _published(store_dir).items() if p not in before}
    assert len(new) >= 4  # the three steps' segments and array records
    after = [v for k, v in events[first_flush:] if k == "fsync"]
    assert set(new.values()) <= {i for i, _ in after}  # every new lineage file's bytes
    assert {os.path.dirname(p) for p in new} <= {p for _, p in after}  # and its directory


def test_lineage_lost_in_a_power_loss_fails_the_checks_saying_so(
    instance: dg.DagsterInstance, store_dir: str
) -> None:
    """A step's lineage lost as a power loss before the flush would lose it (its segment, and
    its array record with it or not): the readable check fails, and says group commit may be
    why."""
    from dslog_dagster.assets import lineage_checks
    from dslog_dagster.assets.checks import CHECK_READABLE
    from dslog_dagster.naming import array_name
    from tests.dagster.pipeline import PIPELINE, SMOOTHED

    dslog = DSLogResource(store_dir=store_dir, group_commit=True)
    checks = lineage_checks([SMOOTHED])
    res = dg.materialize([*PIPELINE, *checks], instance=instance, resources={"dslog": dslog})
    assert all(e.passed for e in res.get_asset_check_evaluations())
    store = DSLog(store_dir).store
    name = array_name(SMOOTHED)
    (op,) = [op for op in store.operations() if op.outputs[0].name == name]
    Path(store_dir, "operations", f"{op.op_id}.parquet").unlink()
    for also_the_array in (False, True):
        if also_the_array:
            shutil.rmtree(store.layout.array_dir(name))
        res = dg.materialize(
            [*PIPELINE, *checks],
            instance=instance,
            resources={"dslog": dslog},
            selection=dg.AssetSelection.checks_for_assets(SMOOTHED),
        )
        (e,) = [e for e in res.get_asset_check_evaluations() if e.check_name == CHECK_READABLE]
        assert not e.passed
        assert "group_commit: a power loss before the flush" in e.description
        assert "materialize it again" in e.description
