"""The versioned value slot: publishing, reading back byte for byte, retention by count and by
age (injected clock), leases that keep a read version, tombstones that say why one is gone."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dslog_dagster.errors import LineageNotFoundError, ValueExpiredError
from dslog_dagster.io_managers.value_versions import Retention, ValueSlot


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _publish(slot: ValueSlot, version: str, value: np.ndarray, clock: Clock) -> Path:
    tmp = slot.staging(".npy")
    with tmp.open("wb") as f:
        np.save(f, value, allow_pickle=False)
    return slot.publish(tmp, version, ".npy", clock)


def _stored(slot: ValueSlot) -> set[str]:
    return {v for v, _, _ in slot.versions()}


@settings(max_examples=30, deadline=None)
@given(
    value=hnp.arrays(
        dtype=st.sampled_from([np.float64, np.int32, np.bool_, np.float32, np.uint64]),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
    ),
    version=st.text(min_size=1, max_size=12),
)
def test_published_value_reads_back_byte_for_byte(
    tmp_path_factory: pytest.TempPathFactory, value: np.ndarray, version: str
) -> None:
    slot = ValueSlot(tmp_path_factory.mktemp("v") / "a" / "b")
    _publish(slot, version, value, Clock())
    with slot.reading(version) as path:
        back = np.load(path, allow_pickle=False)
    assert back.dtype == value.dtype
    assert back.shape == value.shape
    assert back.tobytes() == value.tobytes()
    assert _stored(slot) == {version}
    assert os.path.realpath(slot.pointer(".npy")) == os.path.realpath(path)
    assert not [p for p in slot.dir.iterdir() if p.name.endswith(".tmp")]


def test_keep_last_keeps_the_newest_n(tmp_path: Path) -> None:
    clock = Clock()
    slot = ValueSlot(tmp_path / "x")
    for i in range(5):
        clock.t += 10
        _publish(slot, f"r{i}", np.full(3, float(i)), clock)
    removed = slot.apply(Retention(keep_last=2, clock=clock), protect=set())
    assert sorted(removed) == ["r0", "r1", "r2"]
    assert _stored(slot) == {"r3", "r4"}
    with (
        pytest.raises(ValueExpiredError, match=r"`r1`.*expired by retention.*keep_last=2"),
        slot.reading("r1"),
    ):
        pass
    with slot.reading("r3") as p:
        assert np.load(p).tolist() == [3.0, 3.0, 3.0]


def test_age_rule_with_an_injected_clock(tmp_path: Path) -> None:
    clock = Clock()
    slot = ValueSlot(tmp_path / "x")
    for i in range(4):  # published at t0, t0+1h, t0+2h, t0+3h
        _publish(slot, f"r{i}", np.zeros(2), clock)
        clock.t += 3600
    retention = Retention(keep_for_s=2.5 * 3600, clock=clock)  # now = t0+4h
    assert sorted(slot.apply(retention, protect=set())) == ["r0", "r1"]
    assert _stored(slot) == {"r2", "r3"}
    clock.t += 10 * 3600  # everything is old now, but the newest version always stays
    assert slot.apply(retention, protect=set()) == ["r2"]
    assert _stored(slot) == {"r3"}
    with pytest.raises(ValueExpiredError, match=r"keep_for_hours=2.5"):
        slot.locate("r0")


def test_either_rule_keeps_a_version(tmp_path: Path) -> None:
    clock = Clock()
    slot = ValueSlot(tmp_path / "x")
    for i in range(4):
        _publish(slot, f"r{i}", np.zeros(2), clock)
        clock.t += 3600
    # now = t0+4h: r3, r2 kept by count; r1 by age (3h old, kept for 3.5h); r0 (4h) goes
    slot.apply(Retention(keep_last=2, keep_for_s=3.5 * 3600, clock=clock), protect=set())
    assert _stored(slot) == {"r1", "r2", "r3"}


def test_protected_and_leased_versions_are_kept(tmp_path: Path) -> None:
    clock = Clock()
    slot = ValueSlot(tmp_path / "x")
    for i in range(4):
        clock.t += 1
        _publish(slot, f"r{i}", np.zeros(2), clock)
    lease = slot.lease("r1")
    slot.apply(Retention(keep_last=1, clock=clock), protect={"r0"})
    assert _stored(slot) == {"r0", "r1", "r3"}
    slot.release(lease)
    slot.apply(Retention(keep_last=1, clock=clock), protect=set())
    assert _stored(slot) == {"r3"}


def test_a_lease_taken_during_a_removal_puts_the_version_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: retention read the leases (none), then a reader leases the version before
    retention removes it; retention must see the lease after moving it aside and restore it."""
    clock = Clock()
    slot = ValueSlot(tmp_path / "x")
    for i in range(2):
        clock.t += 1
        _publish(slot, f"r{i}", np.arange(3.0) + i, clock)
    real = slot.live_leases
    calls = {"n": 0}
    leases: list[Path] = []

    def racing() -> set[str]:
        calls["n"] += 1
        out = real()
        if calls["n"] == 1:  # right after retention's first look, a reader arrives
            leases.append(slot.lease("r0"))
        return out

    monkeypatch.setattr(slot, "live_leases", racing)
    assert slot.apply(Retention(keep_last=1, clock=clock), protect=set()) == []
    assert _stored(slot) == {"r0", "r1"}
    assert np.load(slot.locate("r0")).tolist() == [0.0, 1.0, 2.0]
    assert not list(slot.dir.glob(".*.expiring"))
    slot.release(leases[0])


def test_a_lease_of_a_dead_process_does_not_keep_a_version(tmp_path: Path) -> None:
    clock = Clock()
    slot = ValueSlot(tmp_path / "x")
    for i in range(2):
        clock.t += 1
        _publish(slot, f"r{i}", np.zeros(2), clock)
    code = (
        "import sys; from pathlib import Path;"
        "from dslog_dagster.io_managers.value_versions import ValueSlot;"
        f"ValueSlot(Path({str(slot.stem)!r})).lease('r0')"
    )
    subprocess.run([sys.executable, "-c", code], check=True)  # exits holding its lease
    (lease,) = slot.leases.glob("*.lease")
    assert json.loads(lease.read_text())["version"] == "r0"
    assert slot.apply(Retention(keep_last=1, clock=clock), protect=set()) == ["r0"]
    assert not list(slot.leases.glob("*.lease"))


def test_unknown_version_and_legacy_file(tmp_path: Path) -> None:
    slot = ValueSlot(tmp_path / "x")
    with pytest.raises(LineageNotFoundError, match="No stored value"):
        slot.locate("nope")
    np.save(slot.pointer(".npy"), np.ones(2))
    assert slot.legacy() == slot.pointer(".npy")
    _publish(slot, "r0", np.zeros(2), Clock())
    assert slot.legacy() is None  # the link replaced the legacy file
    assert slot.pointer(".npy").is_symlink()


def test_republishing_a_version_replaces_it_and_clears_its_tombstone(tmp_path: Path) -> None:
    clock = Clock()
    slot = ValueSlot(tmp_path / "x")
    _publish(slot, "r0", np.zeros(2), clock)
    clock.t += 1
    _publish(slot, "r1", np.zeros(2), clock)
    slot.apply(Retention(keep_last=1, clock=clock), protect=set())
    clock.t += 1
    _publish(slot, "r0", np.ones(2), clock)  # e.g. a step retry of that run
    with slot.reading("r0") as p:
        assert np.load(p).tolist() == [1.0, 1.0]
    assert not list(slot.dir.glob("*.expired"))


def test_a_read_where_no_lease_can_be_written_still_reads(tmp_path: Path) -> None:
    slot = ValueSlot(tmp_path / "x")
    _publish(slot, "r0", np.arange(3.0), Clock())
    slot.leases.write_text("not a directory")  # mkdir of the lease folder fails
    assert slot.lease("r0") is None
    with slot.reading("r0") as p:
        assert np.load(p).tolist() == [0.0, 1.0, 2.0]


def test_a_removal_that_cannot_leave_its_tombstone_keeps_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    slot = ValueSlot(tmp_path / "x")
    for i in range(2):
        clock.t += 1
        _publish(slot, f"r{i}", np.arange(3.0) + i, clock)
    real = Path.write_text

    def no_tombstones(self: Path, *args: object, **kwargs: object) -> int:
        if self.name.endswith(".expired"):
            msg = "[Errno 28] No space left on device"
            raise OSError(msg)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", no_tombstones)
    with pytest.raises(OSError, match="No space left"):
        slot.apply(Retention(keep_last=1, clock=clock), protect=set())
    assert _stored(slot) == {"r0", "r1"}
    assert np.load(slot.locate("r0")).tolist() == [0.0, 1.0, 2.0]


def test_io_manager_fields_make_the_retention(tmp_path: Path) -> None:
    from dslog_dagster import DSLogIOManager

    assert (
        DSLogIOManager(base_dir=str(tmp_path), store_dir=str(tmp_path / ".dslog"))
        .retention()
        .keeps_all
    )
    r = DSLogIOManager(
        base_dir=str(tmp_path), store_dir=str(tmp_path / ".dslog"), keep_last=3, keep_for_hours=2
    ).retention()
    assert (r.keep_last, r.keep_for_s) == (3, 7200.0)
    assert r.describe() == "keep_last=3, keep_for_hours=2"
    with pytest.raises(ValueError, match="keep_last"):
        DSLogIOManager(base_dir=str(tmp_path), store_dir=str(tmp_path / ".dslog"), keep_last=0)
