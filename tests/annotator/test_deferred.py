"""Deferred annotation (``core/deferred.py``): a capture whose function stays on the
element-wise fast path, or leaves it at any point, gives exactly the eager capture's values and
lineage, and the plain run's values.

The property test draws programs over one to three broadcast-compatible inputs: chains of the
fast path's ufuncs (with scalars and plain constant arrays), sums, means, variances and
standard deviations over random axes (combined with the arrays they summarise), and an
operation off the fast path (indexing, a sort, ``maximum``, a comparison, ``np.asarray``) at a
random step or none; it captures each program deferred and eager, in both modes. The other
tests pin what the switch must get right: a mutation after the switch does not reach values
computed before it, a constant changed after its use does not change a value, in-place
operators, ``np.asarray``, returning an input, a deferred array used after its capture, the
floating-point warnings of the plain run (given once), and the one-row tables.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core import Capture, capture
from dslog_dagster.core.capture import CaptureResult, as_input, capture_inputs
from dslog_dagster.core.deferred import DeferredArray
from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.core.reuse import ViewRegistry
from dslog_dagster.core.reuse.views import tables_equal
from dslog_dagster.errors import CaptureError, StaleLineageError

UNARY = [np.negative, np.exp, np.sqrt, np.log1p, np.tanh, np.absolute, np.square, np.floor]
BINARY = [np.add, np.subtract, np.multiply, np.true_divide, np.power, np.hypot, np.arctan2]
STATS = [np.sum, np.mean, np.var, np.std]
OFF_PATH: list[Callable[[Any], Any]] = [
    lambda a: np.asarray(a)[..., ::-1] if np.ndim(a) else a * 1.0,
    lambda a: np.sort(a, axis=-1) if np.ndim(a) else a + 0.0,
    lambda a: np.maximum(a, 0.25),
    lambda a: np.where(a > 0.5, a, 0.0),
    lambda a: np.asarray(a),
    lambda a: a.mean(),
]


def run(
    func: Callable[..., Any], inputs: list[np.ndarray], mode: str, defer: bool
) -> CaptureResult:
    ins = [as_input(a, k) for k, a in enumerate(inputs)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the mean of an empty array warns in every run
        return capture_inputs(func, ins, mode, "raise", {}, defer=defer)  # type: ignore[arg-type]


def same_values(a: Any, b: Any) -> bool:
    """Bit for bit (NaN equal to NaN, the sign of zero kept), the same scalar or array."""
    pa, pb = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    if len(pa) != len(pb):
        return False
    for x, y in zip(pa, pb, strict=True):
        if type(x) is not type(y) or np.shape(x) != np.shape(y):
            return False
        ax, ay = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if not np.array_equal(ax, ay, equal_nan=True):
            return False
        if not (np.signbit(ax) == np.signbit(ay)).all():
            return False
    return True


def assert_same_capture(func: Callable[..., Any], inputs: list[np.ndarray]) -> None:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = func(*[np.array(a, dtype=np.float64) for a in inputs])  # its own copies
    for mode in ("contributing", "considered"):
        lazy = run(func, inputs, mode, True)
        eager = run(func, inputs, mode, False)
        assert same_values(lazy.value, eager.value)
        plain_t = tuple(plain) if isinstance(plain, tuple | list) else plain
        assert same_values(lazy.value, plain_t)
        assert set(lazy.tables) == set(eager.tables)
        for key, t in lazy.tables.items():
            assert tables_equal(t, eager.tables[key]), key
        if mode == "considered":
            assert lazy.considered_tables is not None
            assert eager.considered_tables is not None
            for key, t in lazy.considered_tables.items():
                assert tables_equal(t, eager.considered_tables[key]), key


@st.composite
def programs(draw: st.DrawFn) -> tuple[list[np.ndarray], list[tuple[Any, ...]]]:
    rank = draw(st.integers(0, 3))
    dims = [st.integers(0, 4) if draw(st.booleans()) else st.integers(1, 4) for _ in range(rank)]
    base = [draw(d) for d in dims]
    inputs = []
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    for _ in range(draw(st.integers(1, 3))):
        r = draw(st.integers(0, rank))
        shape = [1 if draw(st.booleans()) and draw(st.booleans()) else d for d in base[rank - r :]]
        vals = rng.random(shape) * 4 - 1
        special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -2.5])
        if vals.size and draw(st.booleans()):
            vals.flat[rng.integers(0, vals.size, max(1, vals.size // 3))] = rng.choice(special)
        inputs.append(vals)
    steps: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["unary", "binary", "scalar", "const", "sum", "off"]))
        a, b = draw(st.integers(0, 99)), draw(st.integers(0, 99))
        steps.append((kind, a, b, draw(st.booleans())))
    return inputs, steps


def interpret(steps: list[tuple[Any, ...]]) -> Callable[..., Any]:
    """The program as a function of the inputs: each step adds a value to the pool from
    earlier ones (steps whose shapes do not broadcast are skipped); returns the last value, or
    the last two as a tuple."""

    def prog(*xs: Any) -> Any:
        pool: list[Any] = list(xs)
        for kind, a, b, flag in steps:
            x = pool[a % len(pool)]
            y = pool[b % len(pool)]
            if kind == "unary":
                pool.append(UNARY[b % len(UNARY)](x))
            elif kind == "binary":
                try:
                    np.broadcast_shapes(np.shape(x), np.shape(y))
                except ValueError:
                    continue
                f = BINARY[(a + b) % len(BINARY)]
                pool.append(f(x, y) if flag else f(y, x))
            elif kind == "scalar":
                pool.append(x * 1.5 - 2 if flag else 3 / (x + np.float64(0.5)))
            elif kind == "const":
                c = np.arange(np.shape(x)[-1] if np.ndim(x) else 1, dtype=np.int32)
                c = c if np.ndim(x) else np.int64(2)
                pool.append(x + c if flag else c * x)
            elif kind == "sum":
                nd = np.ndim(x)
                axis: Any = None
                if nd and b % 3:
                    axis = b % nd if b % 2 else tuple(range(nd))[: 1 + b % nd]
                stat = STATS[(a // 2) % len(STATS)]
                extra = {"ddof": 1} if stat in (np.var, np.std) and b % 4 == 1 else {}
                if a % 2:
                    pool.append(stat(x, axis=axis, keepdims=flag, **extra))
                else:
                    pool.append(getattr(x, stat.__name__)(axis, keepdims=flag, **extra))
            else:
                pool.append(OFF_PATH[b % len(OFF_PATH)](x))
        if len(pool) > len(xs) + 1 and steps[-1][3]:
            return pool[-1], pool[-2]
        return pool[-1]

    return prog


@settings(max_examples=150, deadline=None)
@given(programs())
def test_deferred_capture_equals_the_eager_capture_and_the_plain_run(
    case: tuple[list[np.ndarray], list[tuple[Any, ...]]],
) -> None:
    inputs, steps = case
    assert_same_capture(interpret(steps), inputs)


@pytest.mark.parametrize(
    "func",
    [
        np.negative,
        lambda a: a + 1.0,
        lambda a: np.sum(a, axis=0),
        lambda a: np.add.reduce(a, axis=1),
        lambda a: a.sum(),
        lambda a: np.sum(a, 0, keepdims=True),
        lambda a: a,
    ],
    ids=[
        "negative",
        "add scalar",
        "sum axis 0",
        "add.reduce axis 1",
        "sum all",
        "sum positional",
        "identity",
    ],
)
def test_the_fast_path_never_annotates(func: Callable[..., Any]) -> None:
    """No annotation list, no twin: the tables come from the maps, one row per input."""
    x = np.random.default_rng(1).random((5, 7))
    seen: list[Any] = []

    def watch(a: Any) -> Any:
        out = func(a)
        seen.append(out)
        return out

    r = capture(watch, x)
    assert isinstance(seen[0], DeferredArray)
    assert seen[0].deferred
    assert all(t.rows == 1 for t in r.tables.values())
    assert_same_capture(func, [x])


def test_returning_an_input_gives_a_copy() -> None:
    x = np.arange(6.0)
    r = capture(lambda a: a, x)
    assert not np.shares_memory(r.value, x)
    r.value[0] = 99.0
    assert x[0] == 0.0


def test_a_mutation_after_the_switch_does_not_reach_earlier_values() -> None:
    def f(a: Any) -> Any:
        y = a + 1.0  # deferred
        a[0] = 100.0  # switches; the twin of `a` changes, `y` was computed before
        return y[::-1], a * 2.0

    assert_same_capture(f, [np.arange(4.0)])
    want = (np.arange(4.0)[::-1] + 1.0, np.array([200.0, 2, 4, 6]))
    assert same_values(capture(f, np.arange(4.0)).value, want)


def test_a_constant_changed_after_its_use_does_not_change_a_value() -> None:
    def f(a: Any) -> Any:
        w = np.ones(3)
        y = a * w  # deferred, reads w now
        w[:] = 5.0  # the re-run at the switch reads 5
        return np.sort(y)

    r = capture(f, np.array([3.0, 1.0, 2.0]))
    assert r.value.tolist() == [1.0, 2.0, 3.0]
    assert_same_capture(f, [np.array([3.0, 1.0, 2.0])])


def test_in_place_operators_switch_and_keep_working() -> None:
    def f(a: Any, b: Any) -> Any:
        a += b
        a *= 2.0
        return a

    assert_same_capture(f, [np.arange(6.0).reshape(2, 3), np.arange(3.0)])


def test_asarray_gives_the_tracked_array() -> None:
    got: list[Any] = []

    def f(a: Any) -> Any:
        t = np.asarray(a)
        got.append(t)
        return t * 2.0

    capture(f, np.arange(3.0))
    assert isinstance(got[0], np.ndarray)
    assert got[0].dtype == _annotator.dtype


def test_shape_queries_do_not_switch() -> None:
    seen: list[Any] = []

    def f(a: Any) -> Any:
        assert (a.shape, a.ndim, a.size, len(a)) == ((2, 3), 2, 6, 2)
        assert (np.shape(a), np.ndim(a), np.size(a)) == ((2, 3), 2, 6)
        out = a / a.shape[1]
        seen.append(out)
        return out

    capture(f, np.ones((2, 3)))
    assert seen[0].deferred


def test_a_deferred_array_used_after_its_capture_is_refused() -> None:
    kept: list[Any] = []

    def f(a: Any) -> Any:
        kept.append(a + 1.0)
        return a * 2.0

    capture(f, np.arange(3.0))
    assert kept[0].shape == (3,)  # reading its shape needs nothing
    with pytest.raises(StaleLineageError, match="after its capture ended"):
        kept[0][0]


def test_the_plain_run_warns_once() -> None:
    def f(a: Any) -> Any:
        return np.sort(np.log(a - a))  # log(0) in the fast path, then the switch re-runs it

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture(f, np.arange(3.0))
    assert [str(w.message) for w in caught] == ["divide by zero encountered in log"]


def test_eager_capture_is_still_available() -> None:
    seen: list[Any] = []
    Capture(defer=False).run(lambda a: seen.append(a) or -a, np.ones(3))
    assert isinstance(seen[0], np.ndarray)
    assert seen[0].dtype == _annotator.dtype


def test_returning_a_deferred_array_of_an_earlier_capture_is_stale() -> None:
    kept: list[Any] = []
    capture(lambda a: kept.append(a + 1.0) or a * 2.0, np.arange(3.0))
    with pytest.raises(StaleLineageError):
        capture(lambda a: kept[0], np.arange(3.0))
    with pytest.raises(StaleLineageError):
        capture(lambda a: a + kept[0], np.arange(3.0))


def test_a_failed_switch_leaves_no_half_switched_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    """The switch annotates the inputs; when that fails, a second try inside the same run
    raises CaptureError instead of handing out partly switched arrays, and the arrays stay
    deferred (a result returned as it is keeps its lineage from the maps)."""
    import dslog_dagster.core.deferred as deferred

    class Failing:
        def __getattr__(self, name: str) -> Any:
            if name == "annotate":

                def fail(a: Any) -> Any:
                    msg = "no room for the annotated input"
                    raise MemoryError(msg)

                return fail
            return getattr(_annotator, name)

    seen: list[str] = []

    def f(a: Any) -> Any:
        y = a + 1.0
        try:
            y[0]
        except MemoryError:
            seen.append("first")
        with pytest.raises(CaptureError, match="could not turn"):
            y[0]
        seen.append("second")
        return y

    monkeypatch.setattr(deferred, "_annotator", Failing())
    r = capture(f, np.arange(3.0))
    assert seen == ["first", "second"]
    assert r.value.tolist() == [1.0, 2.0, 3.0]
    assert r.relation(0, 0).pairs().tolist() == [[0, 0], [1, 1], [2, 2]]


def test_code_that_refuses_a_deferred_input_gets_told_what_to_do() -> None:
    def strict(a: Any) -> Any:
        if not isinstance(a, np.ndarray):
            msg = f"expected an ndarray, got {type(a).__name__}"
            raise TypeError(msg)
        return a * 2.0

    with pytest.raises(CaptureError, match=r"defer=False") as info:
        capture(strict, np.arange(3.0))
    assert isinstance(info.value.__cause__, TypeError)
    assert "`defer=False` on `@tracked_asset`" in str(info.value)  # the Dagster way too
    assert Capture(defer=False).run(strict, np.arange(3.0)).value.tolist() == [0.0, 2.0, 4.0]
    assert capture(lambda a: strict(np.asarray(a)), np.arange(3.0)).value.tolist() == [0, 2, 4]


def _strict_relu(a: Any) -> Any:
    """ReLU that refuses anything but an ndarray, as code that validates its inputs does."""
    if not isinstance(a, np.ndarray):
        msg = f"expected an ndarray, got {type(a).__name__}"
        raise TypeError(msg)
    return np.maximum(a, 0.0)


def test_a_registry_with_defer_false_captures_code_that_refuses_deferred_inputs(
    tmp_path: Path,
) -> None:
    reg = ViewRegistry(str(tmp_path / "views"))
    x = np.arange(1.0, 9.0)
    with pytest.raises(CaptureError, match=r"with_options\(defer=False\)"):
        reg.capture(_strict_relu, x)
    got = reg.with_options(defer=False).capture(_strict_relu, x)
    want = Capture().run(lambda a: np.maximum(a, 0.0), x)
    assert got.obtained == "captured"
    assert got.value.tolist() == want.value.tolist()
    assert got.relation(0, 0) == want.relation(0, 0)


def test_a_pure_registry_capture_with_defer_false_is_probed(tmp_path: Path) -> None:
    """Probes capture as the call did: had they got deferred inputs, every probe would be
    refused (inconclusive), and positive data alone would confirm ReLU's view."""
    reg = ViewRegistry(str(tmp_path / "views"))
    eager = reg.with_options(defer=False, pure=True)
    rng = np.random.default_rng(1)
    got = [eager.capture(_strict_relu, rng.random(8) + 1.0) for _ in range(5)]
    assert [r.obtained for r in got] == ["captured"] * 5  # the probes cross the threshold
    (view,) = [v for v in reg.views() if v.kind == "dim"]
    assert view.status == "non_reusable"
    probed = ViewRegistry(str(tmp_path / "offline"))
    for _ in range(3):  # observed runs confirm it; the offline probes then demote it
        last = probed.with_options(defer=False).capture(_strict_relu, rng.random(8) + 1.0)
    assert probed.lookup(last.signature) is not None
    infos = probed.probe(_strict_relu, rng.random(8) + 1.0, defer=False)
    assert [(i.kind, i.status) for i in infos] == [("dim", "non_reusable")]
