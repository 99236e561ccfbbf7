"""The capture's options have their own channel: every keyword of a call reaches the function.

``capture(func, *arrays, **kwargs)`` and ``ViewRegistry.capture`` used to take ``mode``,
``on_lost``, ``need`` and ``code_version`` for themselves, so ``np.pad(..., mode="edge")``,
``np.convolve(..., mode="same")`` or a user function with such a parameter could not be
captured. The options now live on :class:`Capture` and :meth:`ViewRegistry.with_options`;
these tests check that the function receives its keywords (values equal the plain call) and
that the lineage is the reference annotator's.
"""

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core import Capture, ReusePolicy, ViewRegistry, capture
from dslog_dagster.core.reuse import RegistryCapture
from tests.annotator.reference import reference_capture, to_relations

PAD_MODES = ["constant", "edge", "linear_ramp", "maximum", "mean", "reflect", "symmetric", "wrap"]
CONV_MODES = ["full", "same", "valid"]


def reference_relations(func: Any, /, *arrays: np.ndarray, **kw: Any) -> dict[Any, Any]:
    """Lineage of ``func(*arrays, **kw)`` by the pure-Python reference (contributing)."""
    bound = functools.partial(func, **kw)  # the oracle's own `mode` must not take func's
    values, lineage = reference_capture(bound, *arrays)
    return to_relations(values, lineage, [a.shape for a in arrays])


def assert_matches_plain(got: Any, func: Any, arrays: list[np.ndarray], /, **kw: Any) -> None:
    np.testing.assert_array_equal(got.value, func(*arrays, **kw))
    want = reference_relations(func, *arrays, **kw)
    assert set(got.relations) == set(want)
    for key, rel in want.items():
        assert got.relations[key] == rel, key


def test_pad_with_mode_edge_reaches_np_pad() -> None:
    x = np.arange(6.0).reshape(2, 3)
    got = capture(np.pad, x, pad_width=1, mode="edge")
    assert not got.flagged
    assert_matches_plain(got, np.pad, [x], pad_width=1, mode="edge")
    # The corner (0, 0) of the padded array is a copy of x[0, 0]; (3, 4) of x[1, 2].
    pairs = {tuple(p) for p in got.relation().pairs().tolist()}
    assert (0, 0, 0, 0) in pairs
    assert (3, 4, 1, 2) in pairs


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(
    mode=st.sampled_from(PAD_MODES),
    rows=st.integers(1, 4),
    cols=st.integers(1, 4),
    widths=st.tuples(*[st.integers(0, 3)] * 4),
    considered=st.booleans(),
)
def test_every_pad_mode_equals_the_plain_call(
    mode: str, rows: int, cols: int, widths: tuple[int, ...], considered: bool
) -> None:
    x = np.random.default_rng(rows * 10 + cols).uniform(-2, 2, (rows, cols))
    pad = ((widths[0], widths[1]), (widths[2], widths[3]))
    options = Capture(mode="considered" if considered else "contributing")
    got = options.run(np.pad, x, pad_width=pad, mode=mode)
    assert (got.considered is not None) is considered
    assert_matches_plain(got, np.pad, [x], pad_width=pad, mode=mode)


@pytest.mark.parametrize("func", [np.convolve, np.correlate])
@pytest.mark.parametrize("mode", CONV_MODES)
def test_convolve_and_correlate_modes_reach_numpy(func: Any, mode: str) -> None:
    rng = np.random.default_rng(len(mode))
    a, v = rng.uniform(-1, 1, 7), rng.uniform(-1, 1, 3)
    got = capture(func, a, v, mode=mode)
    assert not got.flagged
    assert got.value.shape == func(a, v, mode=mode).shape
    assert_matches_plain(got, func, [a, v], mode=mode)


@pytest.mark.parametrize("name", ["correlate", "correlate2"])
def test_correlate_values_are_those_of_numpys_plain_run(name: str) -> None:
    """NumPy sums a small kernel's products in its own loop and the rest with BLAS, whose
    fused multiply-adds (AVX-512 kernels) can differ from the annotator's dot in the last
    bit; so the C functions that ``np.correlate``/``np.convolve`` call are wrapped to put
    NumPy's plain values into a tracked result. Checked on any host: a stand-in whose
    tracked run is off by one gets its values from the plain run, its lineage kept."""
    from numpy._core import multiarray

    from dslog_dagster.core import correlation
    from dslog_dagster.core.native import annotator

    original = correlation._ORIGINAL[name]
    assert getattr(multiarray, name).__wrapped__ is original  # installed

    def skewed(a: Any, v: Any, mode: int) -> Any:
        out = original(a, v, mode)
        if out.dtype == correlation.TRACKED:
            annotator.assign_values(out, annotator.values(out) + 1.0)
        return out

    wrapped = correlation._exact(skewed)
    a, v = np.arange(1.0, 8.0), np.array([0.5, -1.0, 2.0])
    eager = Capture(defer=False)  # tracked arrays from the start, as NumPy's C code sees them
    got = eager.run(lambda x, y: wrapped(x, y, 2), a, v)  # mode 2: "full"
    np.testing.assert_array_equal(got.value, original(a, v, 2))
    want = eager.run(lambda x, y: original(x, y, 2), a, v)
    assert got.relations == want.relations
    raw = eager.run(lambda x, y: skewed(x, y, 2), a, v)  # the stand-in, unwrapped
    assert not np.array_equal(raw.value, got.value)


def options_probe(
    a: Any,
    *,
    mode: str = "m",
    need: str = "n",
    reuse: str = "r",
    code_version: str = "c",
    on_lost: str = "o",
    func: str = "f",
) -> Any:
    """A user function whose parameters are named like the capture's options."""
    scale = len(mode) + 2 * len(need) + 3 * len(reuse) + 4 * len(code_version)
    return a * (scale + 5 * len(on_lost) + 6 * len(func))


OPTION_KWARGS: dict[str, Any] = {
    "mode": "considered",
    "need": "considered",
    "reuse": "yes",
    "code_version": "v7",
    "on_lost": "all_to_all",
    "func": "f",
}


def test_a_function_with_option_named_parameters_gets_them() -> None:
    x = np.arange(6.0).reshape(2, 3)
    for options in (Capture(), Capture(mode="considered", on_lost="all_to_all")):
        got = options.run(options_probe, x, **OPTION_KWARGS)
        assert not got.flagged
        assert got.mode == options.mode
        assert_matches_plain(got, options_probe, [x], **OPTION_KWARGS)
    plain = capture(options_probe, x, **OPTION_KWARGS)
    np.testing.assert_array_equal(plain.value, options_probe(x, **OPTION_KWARGS))
    assert plain.mode == "contributing"


def test_registry_forwards_every_keyword(tmp_path: Path) -> None:
    """``reg.capture`` and ``reg.with_options(...).capture`` pass every keyword on, also
    once a view serves the call (the keywords are part of the signatures)."""
    reg = ViewRegistry(tmp_path, ReusePolicy(confirm_after=2, seed=3))
    rng = np.random.default_rng(5)
    bound = reg.with_options(mode="considered", on_lost="raise", code_version="pad-1")
    kinds = []
    for _ in range(5):
        x = rng.uniform(-1, 1, (3, 4))
        got = bound.capture(np.pad, x, pad_width=1, mode="edge")
        kinds.append(got.obtained)
        np.testing.assert_array_equal(got.value, np.pad(x, 1, mode="edge"))
        assert (
            got.relations[(0, 0)]
            == reference_relations(np.pad, x, pad_width=1, mode="edge")[(0, 0)]
        )
    assert kinds[-1] == "dim", kinds
    # Another mode of np.pad is another call: its own signature, never the edge view.
    x = rng.uniform(-1, 1, (3, 4))
    wrap = bound.capture(np.pad, x, pad_width=1, mode="wrap")
    assert wrap.obtained == "captured"
    assert_matches_plain(wrap, np.pad, [x], pad_width=1, mode="wrap")
    probe = reg.capture(options_probe, x, **OPTION_KWARGS)
    assert_matches_plain(probe, options_probe, [x], **OPTION_KWARGS)
    conv = reg.with_options(need="all").capture(np.convolve, x[0], x[1], mode="same")
    assert_matches_plain(conv, np.convolve, [x[0], x[1]], mode="same")


def test_options_are_immutable_and_validated(tmp_path: Path) -> None:
    opts = Capture(mode="considered")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.mode = "contributing"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Capture("considered")  # type: ignore[misc]  # keyword-only: no positional options
    with pytest.raises(ValueError, match="on_lost"):
        Capture(on_lost="drop")  # type: ignore[arg-type]
    reg = ViewRegistry(tmp_path)
    bound = reg.with_options(mode="considered", need="considered", code_version="1")
    assert isinstance(bound, RegistryCapture)
    assert (bound.registry, bound.mode, bound.need, bound.code_version) == (
        reg,
        "considered",
        "considered",
        "1",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        bound.need = "all"  # type: ignore[misc]
    with pytest.raises(ValueError, match="on_lost"):
        reg.with_options(on_lost="drop")  # type: ignore[arg-type]
