"""Forged annotations: tracked arrays made from raw bytes raise, never read foreign memory.

A ``tracked_float`` element is a float64 plus a 64-bit handle into the capture's arena (epoch,
kind, size estimate, payload: ``hnd`` in ``native/include/dslog/annotations.hpp``). NumPy lets
any bytes become such elements without asking the dtype (``.view(tracked_float)``,
``np.frombuffer``, ``np.ndarray(buffer=)``, a structured view), and positive doubles carry an
epoch near 131,000, which a process reaches after that many captures. The annotator validates
every handle it dereferences (epoch, kind, payload inside its table, group member inside its
group, cell ids inside the inputs) and raises :class:`ForgedLineageError`; handles of another
(or no) epoch raise its parent :class:`StaleLineageError`.

Forged bytes are built here to carry the *running* capture's epoch (read from an annotated
array's handle through ``.view(np.uint64)``), or the running epoch is advanced to the one the
bytes carry (in a child process, through the forward-only test hook
``_annotator._skip_epochs``: epochs are issued once per process), so the checks behind the
epoch test are the ones exercised. A forged handle that
is in range with the right epoch is indistinguishable from a real one: the last test pins that
it yields (wrong but) memory-safe lineage.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dslog_dagster import _annotator
from dslog_dagster.core.capture import TRACKED_FLOAT, Capture, capture
from dslog_dagster.errors import ForgedLineageError, StaleLineageError

LAYOUT = _annotator.handle_layout
EPOCH_SHIFT, KIND_SHIFT, EST_SHIFT = (
    LAYOUT["epoch_shift"],
    LAYOUT["kind_shift"],
    LAYOUT["est_shift"],
)
PAYLOAD_MASK = (1 << LAYOUT["payload_bits"]) - 1
MEMBER_BITS = LAYOUT["member_bits"]
K_LIST, K_CELL, K_JOIN, K_PAIR, K_CELL2, K_PROG, K_GROUP, K_CELLSET = range(8)
N = 64  # cells per input: small, so every table index below is far out of range


def handles(a: Any) -> np.ndarray:
    """The handles of a tracked array (C order), as uint64."""
    return np.ascontiguousarray(a).view(np.uint64).reshape(-1, 2)[:, 1]


def epoch_of(a: Any) -> int:
    """The running capture's epoch, read from the first annotated element of `a`."""
    h = handles(a)
    return int(h[h != 0][0]) >> EPOCH_SHIFT


def make_handle(epoch: int, kind: int, payload: int, est: int = 1) -> int:
    return (epoch << EPOCH_SHIFT) | (kind << KIND_SHIFT) | (est << EST_SHIFT) | payload


def forge(hs: list[int] | np.ndarray, values: np.ndarray | None = None) -> Any:
    """A tracked array of the given handles, made the forbidden way: a view of raw uint64s."""
    hs = np.asarray(hs, dtype=np.uint64)
    vals = np.arange(1.0, len(hs) + 1.0) if values is None else values
    raw = np.empty((len(hs), 2), dtype=np.uint64)
    raw[:, 0] = vals.view(np.uint64)
    raw[:, 1] = hs
    return raw.view(TRACKED_FLOAT).reshape(-1)


def _group_payload(group: int, member: int) -> int:
    return (group << MEMBER_BITS) | member


# (kind, payload, est) out of range for a capture of two N-cell inputs that made few tables.
BAD = [
    pytest.param(K_LIST, 5_000, 1, id="list"),
    pytest.param(K_LIST, PAYLOAD_MASK, 255, id="list-last"),
    pytest.param(K_CELL, 2 * N, 1, id="cell-past-inputs"),
    pytest.param(K_CELL, PAYLOAD_MASK, 1, id="cell-last"),
    pytest.param(K_JOIN, 5_000, 2, id="join"),
    pytest.param(K_PAIR, 5_000, 255, id="pair"),
    pytest.param(K_CELL2, 3, 200, id="cell2-no-such-distance"),
    pytest.param(K_PROG, 5_000, 255, id="prog"),
    pytest.param(K_PROG, PAYLOAD_MASK, 255, id="prog-last"),
    pytest.param(K_GROUP, _group_payload(7, 0), 255, id="group"),
    pytest.param(K_CELLSET, 0, 200, id="cellset-no-such-set"),
    pytest.param(K_CELLSET, 12, 255, id="cellset-last-set"),
]


def _ops() -> dict[str, Callable[[Any, Any], Any]]:
    """Operations that dereference or carry a forged operand to the output."""
    return {
        "add": lambda x, f: x + f,
        "add-forged-first": lambda x, f: f + x,
        "iadd": lambda x, f: np.add(x.copy(), f, out=x.copy()),
        "sum": lambda x, f: np.sum(np.concatenate([x, f])),
        "sum-axis0": lambda x, f: np.sum(np.stack([x, f, x]), axis=0),
        "cumsum": lambda x, f: np.cumsum(np.concatenate([x, f])),
        "maximum": lambda x, f: np.maximum(x, f),
        "max-reduce": lambda x, f: np.max(np.concatenate([x, f])),
        "sin": lambda x, f: np.sin(f),
        "negative": lambda x, f: -f,
        "sort": lambda x, f: np.sort(np.concatenate([x, f])),
        "concatenate": lambda x, f: np.concatenate([x, f]),
        "dot": lambda x, f: np.dot(x, f),
        "matmul": lambda x, f: x[None, :] @ f[:, None],
        "clip": lambda x, f: np.clip(x, f, x + 100.0),
        "take": lambda x, f: f[::-1],
        "power": lambda x, f: np.power(x, f),
    }


OPS = _ops()


@pytest.mark.parametrize("mode", ["contributing", "considered"])
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize(("kind", "payload", "est"), BAD)
def test_out_of_range_handles_of_every_kind_raise(
    kind: int, payload: int, est: int, op: str, mode: str
) -> None:
    """Each kind with a payload outside its table, at the running epoch, in
    every operation family and both modes: ForgedLineageError, from the operation itself or
    from extraction of the result that carries it."""

    def f(x: Any, y: Any) -> Any:
        forged = forge([make_handle(epoch_of(x), kind, payload, est)] * N)
        return OPS[op](x + y, forged)

    rng = np.random.default_rng(1)
    with pytest.raises(ForgedLineageError, match="not produce"):
        Capture(mode=mode).run(f, rng.random(N), rng.random(N))


def test_group_member_outside_its_group_raises() -> None:
    """A real group handle (a row reduction along axis 0 makes one) with a member index past
    the group's columns is rejected, as is one past the group table."""

    def f(x: Any) -> Any:
        s = np.sum(x, axis=0)  # 8 columns: a group of 8 members
        h = int(handles(s)[0])
        assert (h >> KIND_SHIFT) & 7 == K_GROUP
        member_past = h + 8  # same group, member 8 of 8
        return s + forge([member_past] * 8)

    with pytest.raises(ForgedLineageError):
        capture(f, np.random.default_rng(2).random((6, 8)))


@pytest.mark.parametrize("where", ["operation", "reduction", "extraction"])
def test_cell_with_shared_set_past_the_inputs_raises(where: str) -> None:
    """A real {cell} ∪ shared-set handle (an array minus a broadcast scalar makes one) with
    its cell moved past the inputs is rejected, by the next operation or by extraction."""

    def f(x: Any) -> Any:
        s = x - x.min()  # every cell but the minimum: {c} ∪ {argmin}
        h = handles(s)
        kinds = (h >> np.uint64(KIND_SHIFT)) & np.uint64(7)
        real = int(h[kinds == K_CELLSET][0])
        past = forge([(real & ~PAYLOAD_MASK) | (2 * N)] * N)
        if where == "operation":
            return past * 2.0
        return np.sum(past) if where == "reduction" else past

    with pytest.raises(ForgedLineageError):
        capture(f, np.random.default_rng(3).random(N))


def test_random_bytes_with_the_running_epoch_raise() -> None:
    """Random kinds, estimates and payloads (epoch set to the running one), many seeds."""
    for seed in range(20):
        rng = np.random.default_rng(seed)

        def f(x: Any, rng: np.random.Generator = rng) -> Any:
            bits = rng.integers(0, 1 << EPOCH_SHIFT, size=N, dtype=np.uint64)
            forged = forge(bits | np.uint64(epoch_of(x) << EPOCH_SHIFT))
            return np.sum(x * forged)

        with pytest.raises(ForgedLineageError):
            capture(f, rng.random(N))


def test_random_bytes_of_any_epoch_raise() -> None:
    """Fully random handles: another epoch (stale or never issued) or a forged one."""
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        forged = forge(rng.integers(1, 1 << 64, size=N, dtype=np.uint64, endpoint=False))
        with pytest.raises(StaleLineageError):
            capture(lambda x, forged=forged: np.cumsum(x + forged), rng.random(N))


def _advance_to_epoch(target: int) -> None:
    """The next capture of this process gets epoch `target` (forward only: child processes)."""
    _annotator._skip_epochs(target - 1)


VIEWS: dict[str, Callable[[], Any]] = {
    "view of float64": lambda: np.arange(8.0).view(TRACKED_FLOAT),
    "view of int64": lambda: (
        np.arange(8, dtype=np.int64) * (1 << (KIND_SHIFT + 1)) + (3000 << EPOCH_SHIFT)
    ).view(TRACKED_FLOAT),
    "small int64 (epoch 0)": lambda: np.arange(1, 9, dtype=np.int64).view(TRACKED_FLOAT),
    "frombuffer": lambda: np.frombuffer(np.arange(8.0).tobytes(), dtype=TRACKED_FLOAT),
    "ndarray(buffer=)": lambda: np.ndarray(
        (4,), TRACKED_FLOAT, buffer=bytearray(np.arange(8.0).tobytes())
    ),
    "structured view": lambda: np.array(
        [(float(i), float(i) + 1.0) for i in range(4)], dtype=[("v", "f8"), ("h", "f8")]
    ).view(TRACKED_FLOAT),
}


def _in_child(call: str) -> None:
    """Run ``call`` (a function of this module) in a fresh process: reaching the epoch that
    bytes carry moves the epoch counter forward for good, which this process must not do."""
    root = Path(__file__).resolve().parents[2]
    code = f"import tests.annotator.test_forged_handles as t; t.{call}; print('ok')"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def views_at_their_epochs(names: list[str]) -> None:
    """For each epoch the bytes of the views hold, in increasing order, advance to exactly
    that epoch (so the epoch check passes) and use every view carrying it in the capture
    running at that epoch: each use must raise, never crash."""
    by_epoch: dict[int, list[str]] = {}
    for name in names:
        for ep in {int(h) >> EPOCH_SHIFT for h in handles(VIEWS[name]())}:
            by_epoch.setdefault(ep, []).append(name)
    assert len(by_epoch) > len(names)
    for target in sorted(by_epoch):
        carrying = by_epoch[target]
        if target == 0:  # epoch 0 is never issued: any running epoch will do
            target = _annotator.last_epoch() + 1
        _advance_to_epoch(target)

        def f(x: Any, target: int = target, carrying: list[str] = carrying) -> Any:
            assert epoch_of(x) == target
            for name in carrying:
                v = VIEWS[name]()
                with pytest.raises(StaleLineageError):
                    np.sum(x[: v.size] + v) + np.max(v)
            return x * 1.0

        Capture(mode="considered").run(f, np.arange(4.0))


def test_views_of_plain_data_at_the_epochs_their_bytes_carry() -> None:
    """The bug report: positive doubles near 1.0 read as handles of epoch ~131,000."""
    _in_child(f"views_at_their_epochs({sorted(VIEWS)!r})")


def views_in_sort_and_extraction() -> None:
    """[0.0, 1.0] viewed: the handle is 1.0's bits (kList 0 of the epoch they carry); the same
    for 2.0. At those epochs a capture that made no list yet
    must reject them in a considered sort and when the view itself is returned."""
    for value, use in (
        (1.0, lambda v: Capture(mode="considered").run(lambda x: np.sort(v), np.ones(4))),
        (2.0, lambda v: capture(lambda x: np.concatenate([x, v]), np.ones(4))),
    ):
        bits = int(np.float64(value).view(np.uint64))
        assert (bits >> KIND_SHIFT) & 7 == K_LIST
        _advance_to_epoch(bits >> EPOCH_SHIFT)
        view = np.array([0.0, value]).view(TRACKED_FLOAT)
        assert int(handles(view)[0]) == bits
        with pytest.raises(ForgedLineageError):
            use(view)


def test_views_raise_in_sort_and_extraction_at_the_matching_epoch() -> None:
    _in_child("views_in_sort_and_extraction()")


def test_forged_cells_past_the_inputs_raise_on_the_vector_path() -> None:
    """Two contiguous operands whose cells advance by one take the AVX2 kernel; forged cells
    that run past the last input cell must not be written as valid pairs."""

    def f(x: Any) -> Any:
        ep = epoch_of(x)
        forged = forge([make_handle(ep, K_CELL, 10 + i) for i in range(4 * N)])
        return x[: 4 * N] + forged

    with pytest.raises(ForgedLineageError):
        capture(f, np.ones(8 * N)[: 4 * N + 0])


def test_forged_reference_inside_a_lazy_union_raises_when_flattened() -> None:
    """A union with a big set stores its operands by reference without reading them; the
    forged one is caught when the union is read (here: extraction), not earlier."""

    def f(x: Any) -> Any:
        m = x - x.mean()  # every cell: {i} ∪ (all cells), a lazy union
        forged = forge([make_handle(epoch_of(x), K_JOIN, 1 << 30, 255)] * x.size)
        return m + forged

    with pytest.raises(ForgedLineageError):
        capture(f, np.random.default_rng(3).random(200))


def test_stale_handles_still_raise_stale() -> None:
    """A tracked array kept from an earlier capture: StaleLineageError, not the forged one."""
    kept: list[Any] = []
    capture(lambda x: (kept.append(x * 2.0), x)[1], np.ones(N))
    with pytest.raises(StaleLineageError) as info:
        capture(lambda x: x + kept[0], np.ones(N))
    assert not isinstance(info.value, ForgedLineageError)


def test_in_range_forged_handles_are_indistinguishable_but_safe() -> None:
    """Copying a real handle into another element (through a uint64 view) cannot be told
    apart from real lineage: it is not an error, and the lineage names the copied cell."""

    def f(x: Any) -> Any:
        y = x * 1.0
        raw = y.view(np.uint64).reshape(-1, 2)
        raw[5, 1] = raw[0, 1]  # element 5 now claims to come from cell 0
        return y

    r = capture(f, np.arange(8.0))
    pairs = r.relation(0, 0).pairs().tolist()
    assert [5, 0] in pairs
    assert [5, 5] not in pairs
