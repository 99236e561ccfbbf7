"""The factorised extraction equals the pair-by-pair one, cell for cell (issue 23).

Every capture now gets its tables straight from the annotation handles
(:mod:`dslog_dagster.core.extraction`, ``native/src/extract.cpp``). The old extraction, which
wrote every (output cell, input cell) pair, is the oracle
(:func:`dslog_dagster.core.testing.extraction.pairs_and_tables`): over the whole coverage grid
and over random composed pipelines, in both modes, the new native table, the stored table and
the lazily expanded relations must all hold exactly its pairs. Two more tests pin the point of
the change: a capture whose raw pairs could never be held in memory finishes with a table of a
few rows, and nothing on the capture path expands the pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster import _annotator
from dslog_dagster.core.capture import Capture, capture
from dslog_dagster.core.extraction import LazyRelations, extraction_stats
from dslog_dagster.core.testing.extraction import pairs_and_tables, same_pairs
from tests.annotator.grid import CASES, GridCase
from tests.annotator.reference import MODES, Mode
from tests.annotator.test_capture_grid import RAISES

GRID = [
    pytest.param(case, mode, id=f"{case.id}-{mode}")
    for case in CASES
    if case.name not in RAISES
    for mode in MODES
]


def _check(func: Callable[..., Any], arrays: list[np.ndarray], mode: str) -> None:
    with np.errstate(all="ignore"):
        got = pairs_and_tables(func, arrays, mode)
    assert got
    for key, (rel, stored, native) in got.items():
        assert native.n_pairs == rel.n, key
        assert native.rows <= max(rel.n, 1), key
        assert same_pairs(native.decompress(), rel), f"native table of {key}"
        assert same_pairs(stored.decompress(), rel), f"stored table of {key}"


@pytest.mark.parametrize(("case", "mode"), GRID)
def test_grid_factorised_equals_pairs(case: GridCase, mode: Mode) -> None:
    _check(case.func, case.inputs(), mode)


def _blur(a: Any) -> Any:
    p = np.pad(a, 1, mode="edge")
    h, w = a.shape
    return sum(p[i : i + h, j : j + w] for i in range(3) for j in range(3)) / 9


# Steps of a pipeline on a 2-D array (each keeps it 2-D and non-empty).
STEPS: dict[str, Callable[[Any], Any]] = {
    "neg": np.negative,
    "exp": np.exp,
    "double": lambda a: a + a,
    "center": lambda a: a - a.mean(),
    "center0": lambda a: a - a.mean(axis=0),
    # {cell} ∪ shared set with the cell on either side and the shared set changing along the
    # scan (the extraction's quick path for repeated shared sets must notice every change)
    "centers": lambda a: np.concatenate(
        [a - a.mean(), a.mean(axis=1, keepdims=True) - a, a - a.sum()], axis=1
    ),
    "standardize": lambda a: (a - a.mean(axis=0)) / (a.std(axis=0) + 1.0),
    "minmax": lambda a: (a - a.min()) / (a.max() - a.min() + 1.0),
    "softmax": lambda a: (
        np.exp(a - a.max(axis=1, keepdims=True))
        / np.exp(a - a.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True)
    ),
    "cumsum1": lambda a: np.cumsum(a, axis=1),
    "sum0": lambda a: np.sum(a, axis=0, keepdims=True),
    "max1": lambda a: np.max(a, axis=1, keepdims=True),
    "flip": np.flip,
    "transpose": np.transpose,
    "blur": _blur,
    "sort1": lambda a: np.sort(a, axis=1),
    "repeat": lambda a: np.repeat(a, 2, axis=0),
    "where": lambda a: np.where(a > a.mean(), a, 0.0),
    "gram": lambda a: a @ a.T,
    "stack": lambda a: np.concatenate([a, a[::-1]], axis=1),
    "slice": lambda a: a[::2, 1:] if a.shape[1] > 1 else a[::2],
}


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    shape=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    steps=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=4),
    mode=st.sampled_from(MODES),
    two=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_composed_pipelines(
    shape: tuple[int, int], steps: list[str], mode: str, two: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=shape)

    def pipeline(*arrays: Any) -> Any:
        a = arrays[0] + arrays[1] if len(arrays) == 2 else arrays[0]
        for s in steps:
            a = STEPS[s](a)
        return a

    arrays = [x, rng.uniform(-2, 2, size=shape)] if two else [x]
    _check(pipeline, arrays, mode)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    shape=st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple),
    axis=st.integers(-1, 2),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 2**16),
)
def test_reductions_and_broadcasts_any_rank(
    shape: tuple[int, ...], axis: int, mode: str, seed: int
) -> None:
    x = np.random.default_rng(seed).uniform(-2, 2, size=shape)
    ax = None if not shape or axis == -1 else axis % len(shape)

    def f(a: Any) -> Any:
        return (a - np.mean(a, axis=ax, keepdims=True), np.max(a, axis=ax), a.sum())

    _check(f, [x], mode)


def test_lineage_beyond_memory_finishes_with_few_rows() -> None:
    """``x - x.mean()`` on 512×512: 6.9e10 raw pairs (1.1 TB as the old extraction's
    columns); the factorised extraction stores one row."""
    x = np.random.default_rng(0).uniform(size=(512, 512))
    r = capture(lambda a: a - a.mean(), x)
    assert r.tables is not None
    t = r.tables[(0, 0)]
    assert t.n_pairs == x.size**2
    assert t.rows == 1
    s = capture(lambda a: (a - a.mean(axis=0)) / a.std(axis=0), x).tables
    assert s is not None
    assert s[(0, 0)].n_pairs == x.size * 512
    assert s[(0, 0)].rows == 1


def test_capture_expands_no_pairs_until_read() -> None:
    x = np.random.default_rng(1).uniform(size=(30, 20))
    r = Capture(mode="considered").run(lambda a: (a - a.mean(axis=0)) / a.std(axis=0), x)
    assert isinstance(r.relations, LazyRelations)
    assert isinstance(r.considered, LazyRelations)
    assert "0 expanded" in repr(r.relations)
    rel = r.relation(0, 0)
    assert rel.n == 30 * 30 * 20
    assert "1 expanded" in repr(r.relations)
    assert r.relation(0, 0) is rel  # expanded once
    assert r.considered_tables is not None
    assert r.considered_tables[(0, 0)].n_pairs == r.relation(0, 0, considered=True).n


def test_registry_capture_expands_no_pairs(tmp_path: Path) -> None:
    """The view registry learns from the capture's own tables, not from its relations."""
    from dslog_dagster.core.reuse import ReusePolicy, ViewRegistry

    reg = ViewRegistry(tmp_path, ReusePolicy(seed=1))
    x = np.random.default_rng(2).uniform(size=(40, 30))
    r = reg.capture(lambda a: a - a.mean(axis=0), x)
    assert r.obtained == "captured"
    assert isinstance(r.relations, LazyRelations)
    assert "0 expanded" in repr(r.relations)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "step",
    [
        pytest.param(lambda a, b: np.sum(a, axis=0), id="first-input"),
        pytest.param(lambda a, b: np.sum(b, axis=0), id="second-input"),
        pytest.param(lambda a, b: np.sum(b[:, ::-1], axis=0), id="reversed-columns"),
        pytest.param(lambda a, b: np.sum(b.T, axis=0), id="transposed"),
        pytest.param(lambda a, b: np.sum(b[1:, 2:-1], axis=0), id="inner-block"),
        pytest.param(lambda a, b: (np.sum(a, axis=0), np.sum(b, axis=0)[3:]), id="both-partly"),
    ],
)
def test_column_sums_of_either_input(step: Callable[..., Any], mode: str) -> None:
    """A reduction along axis 0 leaves every output column a member of one group; runs of
    members are closed as diagonal runs (one per reduced row), in whichever input they lie."""
    rng = np.random.default_rng(5)
    _check(step, [rng.uniform(-2, 2, (9, 11)), rng.uniform(-2, 2, (12, 11))], mode)


def test_group_members_read_once_are_runs_and_read_again_are_sinks() -> None:
    """`sum(axis=0)` reads each member of its group once: one diagonal run per reduced row.
    Standardizing reads the column statistics' members on every row: one sink per member
    (a run per row and member would make a record each). Both end as one stored row."""
    x = np.random.default_rng(9).uniform(-2, 2, (60, 50))
    cases = {
        "sum0": (lambda a: np.sum(a, axis=0), {"runs": 60, "atoms": 0}),
        "standardize": (lambda a: (a - a.mean(axis=0)) / a.std(axis=0), {"runs": 0, "atoms": 50}),
    }
    for name, (f, want) in cases.items():
        epoch = _annotator.begin(0)
        try:
            stats = extraction_stats(f(_annotator.annotate(x)[0]), [x.shape])
        finally:
            _annotator.end(epoch)
        assert {k: stats[k] for k in want} == want, name
        (rel, _, native), *_ = pairs_and_tables(f, [x]).values()
        assert native.rows == 1, name
        assert same_pairs(native.decompress(), rel), name
