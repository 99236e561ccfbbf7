"""Views of the considered relation alone (``need="considered"``), and exactness on hostile data.

Picks by comparison and sorts have a data-dependent *contributing* relation (which cell won)
but a shape-determined *considered* relation (every compared cell: both operands, the whole
lane). A view of the considered relation alone may therefore serve them; these tests check
that it does, that every served relation equals a fresh capture also on ties, NaNs, infinities,
signed zeros and constants, and that functions whose considered relation depends on the data
are never confirmed. The grid-wide test runs every ICDE grid function through the registry in
both relations and compares each served call on such data with a fresh capture.
"""

import functools
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dslog_dagster.core import Capture, ReusePolicy, ViewRegistry
from dslog_dagster.core.reuse import persistence
from dslog_dagster.errors import CaptureError, DSLogError, ViewMismatchWarning
from dslog_dagster.tracking import obtain_lineage
from tests.annotator.grid import CASES, ICDE_NAMES, GridCase

CONSIDERED: dict[str, Any] = {"mode": "considered", "need": "considered"}


@pytest.fixture(autouse=True)
def _unsynced_views(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about exactness, not durability: view files are written without fsync
    (hundreds of views; an fsync each dominates the run time on a busy disk)."""
    monkeypatch.setattr(persistence, "atomic_write_bytes", persistence.replace_unsynced)


def same(a: Any, b: Any) -> bool:
    return set(a) == set(b) and all(a[k] == b[k] for k in a)


def train(reg: ViewRegistry, func: Callable[..., Any], shapes: list[tuple[int, ...]]) -> None:
    """Random-data calls until one is served (a candidate and ``m = 2`` matches confirm)."""
    rng = np.random.default_rng(0)
    for _ in range(6):
        r = reg.with_options(**CONSIDERED).capture(func, *[rng.uniform(-2, 2, s) for s in shapes])
        if r.obtained != "captured":
            return
    pytest.fail(f"{func} was never served from a considered-only view")


# Picks by comparison and sorts: considered relation = both operands / the whole lane.
PICKS: list[tuple[str, Callable[..., Any], int]] = [
    ("maximum", np.maximum, 2),
    ("minimum", np.minimum, 2),
    ("fmax", np.fmax, 2),
    ("fmin", np.fmin, 2),
    ("amax", functools.partial(np.amax, axis=1), 1),
    ("amin", functools.partial(np.amin, axis=0), 1),
    ("ptp", functools.partial(np.ptp, axis=1), 1),
    ("max-all", np.max, 1),
    ("sort", functools.partial(np.sort, axis=0), 1),
    ("sort-flat", functools.partial(np.sort, axis=None), 1),
]
SHAPE = (5, 4)
# Ties, NaN, infinities and signed zeros: where a pick's winner changes.
HOSTILE = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.nan, np.inf, -np.inf])


@pytest.mark.parametrize(("name", "func", "arity"), PICKS, ids=[p[0] for p in PICKS])
def test_considered_view_of_a_pick_is_exact_on_hostile_data(
    name: str, func: Callable[..., Any], arity: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reg = ViewRegistry(tmp_path_factory.mktemp(name), ReusePolicy(pure=True, seed=3))
    train(reg, func, [SHAPE] * arity)

    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        st.lists(hnp.arrays(np.float64, SHAPE, elements=HOSTILE), min_size=arity, max_size=arity)
    )
    def check(arrays: list[np.ndarray]) -> None:
        with np.errstate(all="ignore"):
            got = reg.with_options(**CONSIDERED).capture(func, *arrays)
            fresh = Capture(mode="considered").run(func, *arrays)
        # The view is confirmed for every value (not finite-only): each call is served.
        assert got.obtained in ("dim", "gen"), got.obtained
        assert got.considered is not None
        assert fresh.considered is not None
        assert same(got.considered, fresh.considered)
        np.testing.assert_array_equal(got.outputs[0], fresh.outputs[0])
        with pytest.raises(CaptureError, match="considered relation only"):
            got.relation(0, 0)

    check()
    # The contributing relation of a pick depends on the values: never a dim/gen view of it.
    rng = np.random.default_rng(1)
    for _ in range(5):
        r = reg.capture(func, *[rng.uniform(-2, 2, SHAPE) for _ in range(arity)])
        assert r.obtained == "captured"


DATA_DEPENDENT: list[tuple[str, Callable[..., Any]]] = [
    ("unique", np.unique),
    ("unwrap", functools.partial(np.unwrap, axis=0)),
]

#: Partition-based functions consider the whole lane (NumPy's partition compares it), so their
#: considered relation is shape-determined, although which cells they pick is not.
PARTITIONED: list[tuple[str, Callable[..., Any]]] = [
    ("median", functools.partial(np.median, axis=0)),
    ("percentile", functools.partial(np.percentile, q=30.0, axis=1)),
    ("quantile", functools.partial(np.quantile, q=0.5)),
    ("partition", functools.partial(np.partition, kth=1, axis=0)),
]


@pytest.mark.parametrize(("name", "func"), DATA_DEPENDENT, ids=[d[0] for d in DATA_DEPENDENT])
def test_data_dependent_considered_relation_is_never_confirmed(
    name: str, func: Callable[..., Any], tmp_path: Path
) -> None:
    """Small random data agrees with itself (``unwrap`` never crosses ``pi``, ``unique``
    sees distinct values); the probes must still refuse the view."""
    reg = ViewRegistry(tmp_path, ReusePolicy(pure=True, seed=4))
    rng = np.random.default_rng(2)
    kinds = []
    for _ in range(8):
        x = rng.uniform(-0.5, 0.5, (6, 5))
        kinds.append(reg.with_options(**CONSIDERED).capture(func, x).obtained)
    assert set(kinds) == {"captured"}, kinds


@pytest.mark.parametrize(("name", "func"), PARTITIONED, ids=[d[0] for d in PARTITIONED])
def test_partition_based_considered_relation_is_served_and_exact(
    name: str, func: Callable[..., Any], tmp_path: Path
) -> None:
    """Probes confirm the considered view of a partition-based function; every served call
    equals a fresh considered capture, and the contributing relation is never served."""
    reg = ViewRegistry(tmp_path, ReusePolicy(pure=True, seed=4))
    rng = np.random.default_rng(2)
    kinds = []
    for _ in range(8):
        x = rng.uniform(-0.5, 0.5, (6, 5))
        got = reg.with_options(**CONSIDERED).capture(func, x)
        kinds.append(got.obtained)
        fresh = Capture(mode="considered").run(func, x)
        assert got.considered is not None
        assert fresh.considered is not None
        assert same(got.considered, fresh.considered), name
    assert "dim" in kinds, kinds
    both = reg.with_options(mode="considered").capture(func, rng.uniform(-0.5, 0.5, (6, 5)))
    assert both.obtained != "dim", name  # which cell is picked depends on the data


def test_need_is_validated(tmp_path: Path) -> None:
    reg = ViewRegistry(tmp_path, ReusePolicy(pure=True))
    x = np.ones((3, 3))
    with pytest.raises(ValueError, match='needs `mode="considered"`'):
        reg.with_options(need="considered")
    with pytest.raises(ValueError, match="`need` must be"):
        reg.with_options(mode="considered", need="some")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`mode` must be"):
        reg.with_options(mode="some")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match='needs `mode="considered"`'):
        reg.serve(np.max, [x], need="considered")


def test_need_all_in_considered_mode_still_serves_both_relations(tmp_path: Path) -> None:
    """A considered-mode capture teaches both families: ``np.negative`` is served with both
    relations (need="all") and with the considered one alone."""
    reg = ViewRegistry(tmp_path, ReusePolicy(pure=True, seed=5))
    considered = reg.with_options(mode="considered")
    rng = np.random.default_rng(3)
    kinds = [considered.capture(np.negative, rng.random((4, 6))).obtained for _ in range(4)]
    assert kinds[-1] == "dim"
    x = rng.random((4, 6))
    both = considered.capture(np.negative, x)
    only = reg.with_options(**CONSIDERED).capture(np.negative, x)
    fresh = Capture(mode="considered").run(np.negative, x)
    assert (both.obtained, only.obtained) == ("dim", "dim")
    assert same(both.relations, fresh.relations)
    assert both.considered is not None
    assert only.considered is not None
    assert fresh.considered is not None
    assert same(both.considered, fresh.considered)
    assert same(only.considered, fresh.considered)
    assert only.tables is None
    assert only.signature != both.signature


def test_dagster_path_asks_for_the_considered_relation_only(tmp_path: Path) -> None:
    """``obtain_lineage`` in considered mode (what a tracked asset stores) reuses ``np.max``."""
    reg = ViewRegistry(tmp_path, ReusePolicy(pure=True, seed=6))
    rng = np.random.default_rng(4)

    def step(x: Any, **_: Any) -> Any:
        return np.max(x, axis=1)

    kinds = []
    for _ in range(5):
        x = rng.random((6, 5))
        res, _ = obtain_lineage(
            step,
            [x],
            policy="capture",
            mode="considered",
            code_version="v1",
            signature_args={},
            reuse=reg,
        )
        assert res is not None
        kinds.append(res.obtained)
    assert kinds[-1] == "dim"
    fresh = Capture(mode="considered").run(step, x)
    assert res.considered is not None
    assert fresh.considered is not None
    assert same(res.considered, fresh.considered)


# --------------------------------------------------------------------------- the whole grid


def _first_case(name: str) -> GridCase:
    return next(c for c in CASES if c.name == name)


def _hostile(case: GridCase, rng: np.random.Generator) -> list[list[np.ndarray]]:
    """Ties (three levels of the domain), a constant, NaN and signed zeros sprinkled in."""
    out: list[list[np.ndarray]] = []
    doms = [case.domains[min(k, len(case.domains) - 1)] for k in range(len(case.shapes))]
    levels = [np.array([lo, (lo + hi) / 2, hi * 0.999]) for lo, hi in doms]
    out.append([rng.choice(lv, size=s) for lv, s in zip(levels, case.shapes, strict=True)])
    out.append([np.full(s, lv[1]) for lv, s in zip(levels, case.shapes, strict=True)])
    for special in (np.nan, 0.0, -0.0):
        arrs = []
        for (lo, hi), s in zip(doms, case.shapes, strict=True):
            a = rng.uniform(lo, hi, size=s)
            if a.size:
                a.reshape(-1)[rng.integers(0, a.size, size=2)] = special
            arrs.append(a)
        out.append(arrs)
    return out


def _grid_cell(name: str, relation: str, root: Path) -> tuple[int, int]:
    """(served calls on hostile data, served calls that differed from a fresh capture)."""
    case = _first_case(name)
    opts: dict[str, Any] = CONSIDERED if relation == "considered" else {}
    rel = (lambda r: r.considered) if relation == "considered" else (lambda r: r.relations)
    reg = ViewRegistry(root, ReusePolicy(pure=True, seed=7))
    rng = np.random.default_rng([zlib.crc32(name.encode()), len(relation)])
    doms = [case.domains[min(k, len(case.domains) - 1)] for k in range(len(case.shapes))]
    calls = [
        [rng.uniform(lo, hi, size=s) for (lo, hi), s in zip(doms, case.shapes, strict=True)]
        for _ in range(3)  # a candidate and m = 2 matches confirm a view
    ]
    served = wrong = 0
    for k, data in enumerate(calls + _hostile(case, rng)):
        try:
            got = reg.with_options(**opts).capture(case.func, *data)
        except (DSLogError, ValueError, TypeError, IndexError):
            return served, wrong  # the annotator cannot capture it (interp)
        if k < len(calls) or got.obtained == "captured":
            continue
        served += 1
        fresh = Capture(mode=opts.get("mode", "contributing")).run(case.func, *data)
        wrong += int(not same(rel(got), rel(fresh)))
    return served, wrong


@pytest.mark.parametrize("relation", ["contributing", "considered"])
def test_every_grid_function_served_on_hostile_data_equals_fresh_capture(
    relation: str, tmp_path: Path
) -> None:
    served_by: dict[str, int] = {}
    wrong_by: dict[str, int] = {}
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always")
        for name in ICDE_NAMES:
            served_by[name], wrong_by[name] = _grid_cell(name, relation, tmp_path / name)
    demoted = [str(w.message)[:160] for w in caught if issubclass(w.category, ViewMismatchWarning)]
    assert not [n for n, w in wrong_by.items() if w], "served views differed from captures"
    assert not demoted, demoted
    # The test exercises views: most of the grid is served on the hostile data, and the picks
    # are served exactly where their relation is shape-determined.
    assert sum(v > 0 for v in served_by.values()) >= 100
    picks = ["maximum", "minimum", "fmax", "fmin", "amax", "ptp", "sort", "msort"]
    if relation == "considered":
        assert all(served_by[p] for p in picks), served_by
    else:
        assert not any(served_by[p] for p in picks if p != "amax"), served_by


def test_gradient_lineage_declared_analytically_is_reused(tmp_path: Path) -> None:
    """``np.gradient``'s lineage is pure arithmetic and data-independent: declared from
    ``analytic.gradient`` it becomes an ordinary declared view, confirmed by repetition and
    then served without ``capture``."""
    from dslog_dagster.core.api import Array, DSLog, Lineage
    from dslog_dagster.core.testing import analytic

    log = DSLog(tmp_path)
    reg = ViewRegistry(log, ReusePolicy(pure=True, seed=8))

    def register(k: int, declare: bool) -> Any:
        f, g = Array(f"f{k}", (6, 5)), Array(f"g{k}", (6, 5))
        cap = [Lineage(g, f, analytic.gradient((6, 5), axis=0)[0])] if declare else None
        return log.register_operation("np.gradient", [f], [g], cap, {"axis": 0}, reuse=reg)

    assert [register(k, True).capture_method for k in range(3)] == ["user"] * 3
    rec = register(3, False)
    assert rec.capture_method == "view-dim"
    table = log.store.read_lineage(rec, "g3", "f3")
    assert table.decompress() == analytic.gradient((6, 5), axis=0)[0]
