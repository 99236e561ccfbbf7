"""Views of calls not declared pure: the function runs once per call, views are confirmed from
observed captures alone (issue 24), and checks are captures of real calls."""

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core import ReusePolicy, ViewRegistry, capture
from dslog_dagster.errors import ViewMismatchWarning

CALLS: Counter[str] = Counter()


def scale(a: np.ndarray) -> np.ndarray:
    CALLS["scale"] += 1
    return a * 2.0 + 1.0


def colsum(a: np.ndarray) -> np.ndarray:
    CALLS["colsum"] += 1
    return a.sum(axis=0)


def relu(a: np.ndarray) -> np.ndarray:
    CALLS["relu"] += 1
    return np.maximum(a, 0.0)  # data-dependent: which operand wins depends on the sign


def impute(a: np.ndarray) -> np.ndarray:
    CALLS["impute"] += 1
    return np.where(np.isnan(a), 0.0, a)


FUNCS = {"scale": scale, "colsum": colsum, "relu": relu, "impute": impute}


@st.composite
def calls(draw: Any) -> list[tuple[str, np.ndarray]]:
    """A sequence of calls: a function, a shape from a few, values from a few regimes (reused
    arrays too, so base views confirm)."""
    pool: list[np.ndarray] = []
    out = []
    for _ in range(draw(st.integers(4, 14))):
        name = draw(st.sampled_from(sorted(FUNCS)))
        if pool and draw(st.booleans()):
            a = draw(st.sampled_from(pool))
        else:
            shape = draw(st.sampled_from([(3, 4), (5, 4), (6,)]))
            seed = draw(st.integers(0, 10**6))
            rng = np.random.default_rng(seed)
            regime = draw(st.sampled_from(["positive", "mixed", "nan"]))
            a = rng.uniform(0.5, 2.0, shape) if regime == "positive" else rng.normal(size=shape)
            if regime == "nan":
                a.reshape(-1)[int(rng.integers(0, a.size))] = np.nan
            pool.append(a)
        out.append((name, a))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seq=calls(), rate=st.sampled_from([0.0, 0.25, 1.0]))
def test_every_call_runs_the_function_once_and_returns_its_plain_value(
    seq: list[tuple[str, np.ndarray]], rate: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reg = ViewRegistry(tmp_path_factory.mktemp("obs"), ReusePolicy(rate=rate, seed=0))
    for name, a in seq:
        f = FUNCS[name]
        with np.errstate(all="ignore"):
            want = f(a.copy())
        CALLS.clear()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", ViewMismatchWarning)
            res = reg.capture(f, a)
        assert {name: 1} == CALLS, (name, res.obtained)
        np.testing.assert_array_equal(res.value, want)
        if res.obtained != "captured" and name != "relu":
            # data-independent lineage: a served view is exact
            fresh = capture(f, a)
            assert res.relation(0, 0) == fresh.relation(0, 0)
    assert all(i.sampled_checks == 0 for i in reg.views())
    assert all(i.confirmed_by in (None, "observed") for i in reg.views())


def test_the_same_data_confirms_the_base_view_not_the_dim_view(tmp_path: Path) -> None:
    reg = ViewRegistry(tmp_path)
    a = np.arange(12.0).reshape(3, 4) + 1.0
    kinds = [reg.capture(scale, a).obtained for _ in range(5)]
    assert kinds == ["captured", "captured", "base", "base", "base"]
    other = a + 0.5
    assert reg.capture(scale, other).obtained == "captured"  # no dim view from one input


def test_observed_view_serves_nan_free_inputs_only(tmp_path: Path) -> None:
    reg = ViewRegistry(tmp_path)
    rng = np.random.default_rng(0)
    for _ in range(3):
        reg.capture(impute, rng.uniform(1.0, 2.0, (3, 4)))
    assert reg.capture(impute, rng.uniform(1.0, 2.0, (3, 4))).obtained == "dim"
    x = rng.uniform(1.0, 2.0, (3, 4))
    x[1, 2] = np.nan
    res = reg.capture(impute, x)
    assert res.obtained == "captured"
    assert res.relation(0, 0) == capture(impute, x).relation(0, 0)
    # the same NaN input again confirms its exact-input view, which then serves it
    assert [reg.capture(impute, x).obtained for _ in range(2)] == ["captured", "base"]


def test_a_periodic_check_captures_the_call_and_demotes_a_wrong_view(tmp_path: Path) -> None:
    reg = ViewRegistry(tmp_path, ReusePolicy(rate=0.5, seed=0))  # every 2nd call a check
    rng = np.random.default_rng(1)
    for _ in range(3):  # positive data: relu's lineage looks like the identity
        reg.capture(relu, rng.uniform(1.0, 2.0, (2, 3)))
    kinds = []
    for _ in range(3):
        kinds.append(reg.capture(relu, rng.uniform(1.0, 2.0, (2, 3))).obtained)
    assert kinds.count("dim") >= 1
    assert kinds.count("captured") >= 1  # a check: captured instead of served
    neg = -rng.uniform(1.0, 2.0, (2, 3))  # every cell takes the constant: no lineage
    got = []

    def until_demoted() -> None:
        for _ in range(4):
            CALLS.clear()
            res = reg.capture(relu, neg)
            assert CALLS == {"relu": 1}
            got.append(res)
            if res.demoted:
                return

    with pytest.warns(ViewMismatchWarning, match="disagreed"):
        until_demoted()
    last = got[-1]
    assert last.obtained == "captured"
    assert last.relation(0, 0).n == 0  # the captured lineage, not the wrong view's
    assert all(r.obtained == "captured" or r.relation(0, 0).n == 6 for r in got)
    info = reg.lookup(last.demoted[0])
    assert info is not None
    assert info.status == "non_reusable"
