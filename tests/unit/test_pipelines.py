"""The random-pipeline generator (``bench/pipelines.py``) produces real, exactly-lineaged steps.

On tiny inputs every step's relation is compared with a black-box capture of the real NumPy
call: poison one input cell with NaN (inf for the nan-ignoring cumulative ops) and record which
output cells change. Data-dependent steps (sort, partition, percentile, unique, ...) cannot be
captured that way (a poisoned value moves), so for them the relation must reproduce the output
values from the input values it names.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from dslog_dagster.core import LineageRelation
from dslog_dagster.core.testing.baselines import NumPyBaseline, naive_join

BENCH = Path(__file__).resolve().parents[2] / "bench" / "pipelines.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_pipelines", BENCH)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module while the file executes
    spec.loader.exec_module(mod)
    return mod


bp = _load()
TINY = (9, 7)
# Values these ops ignore or structurally discard, so a NaN poison would not show the lineage.
NO_PERTURBATION = {"imag"}
INF_POISON = {"nancumsum", "nancumprod"}


def perturbation_relation(f: Any, x: np.ndarray, poison: float) -> LineageRelation:
    """Output cells that change when one input cell is poisoned, for every input cell."""
    y = f(x)
    outs: list[tuple[int, ...]] = []
    ins: list[tuple[int, ...]] = []
    for a in np.ndindex(*x.shape):
        x2 = x.copy()
        x2[a] = poison
        y2 = f(x2)
        changed = ~((y2 == y) | (np.isnan(y2) & np.isnan(y)))
        for b in zip(*np.nonzero(changed), strict=True):
            outs.append(tuple(int(i) for i in b))
            ins.append(a)
    oc = np.asarray(outs, dtype=np.int64).reshape(len(outs), y.ndim).T
    ic = np.asarray(ins, dtype=np.int64).reshape(len(ins), x.ndim).T
    return LineageRelation.from_columns(y.shape, x.shape, list(oc), list(ic), n=len(outs))


def check_step(p: Any, k: int) -> None:
    step = p.steps[k]
    op = bp.OPS[step.op]
    x, y = p.data[k], p.data[k + 1]
    rel = step.relation
    assert rel.in_shape == x.shape == p.arrays[k].shape
    assert rel.out_shape == y.shape == p.arrays[k + 1].shape
    assert y.ndim == 2
    np.testing.assert_array_equal(bp.to_2d(bp.run_op(op, x, step.args)), y)
    if op.data_dependent:
        check_by_value(step.op, x, y, rel)
    elif step.op in NO_PERTURBATION:
        assert rel == bp.OPS["negative"].lineage(x, y, {})
    else:

        def f(a: np.ndarray) -> np.ndarray:
            return bp.to_2d(bp.run_op(op, a, step.args))

        poison = np.inf if step.op in INF_POISON else np.nan
        assert rel == perturbation_relation(f, x, poison), step


def check_by_value(name: str, x: np.ndarray, y: np.ndarray, rel: LineageRelation) -> None:
    u = rel.unique()
    assert u.n == rel.n, "duplicate pairs"
    src = x[tuple(rel.in_cols)]
    if name in ("sort", "msort", "partition"):
        # A bijection that moves each value to where NumPy put it.
        assert rel.n == x.size
        np.testing.assert_array_equal(y[tuple(rel.out_cols)], src)
        assert len({tuple(c) for c in rel.in_cols.T}) == x.size
    elif name == "unique":
        # Every input cell feeds the one output holding its value.
        assert rel.n == x.size
        assert len({tuple(c) for c in rel.in_cols.T}) == x.size
        np.testing.assert_array_equal(y[tuple(rel.out_cols)], src)
    else:  # percentile, quantile, median: 1 or 2 cells per output, bracketing the value
        flat_out = np.ravel_multi_index(tuple(rel.out_cols), y.shape)
        counts = np.bincount(flat_out, minlength=y.size)
        assert set(counts.tolist()) <= {1, 2}
        lo = np.full(y.size, np.inf)
        hi = np.full(y.size, -np.inf)
        np.minimum.at(lo, flat_out, src)
        np.maximum.at(hi, flat_out, src)
        v = y.reshape(-1)
        assert np.all((lo - 1e-12 <= v) & (v <= hi + 1e-12))


@pytest.mark.parametrize("name", sorted(bp.OPS))
def test_every_op_on_a_tiny_input(name: str) -> None:
    # Uniform [1, 2) keeps arccosh & co. in their domain where [0, 1) would be rejected.
    data = np.random.default_rng(3).uniform(1.0, 2.0, TINY) if name == "arccosh" else None
    p = bp.generate_pipeline(3, 1, TINY, ops=[name], keep_data=True, input_data=data)
    assert [s.op for s in p.steps] == [name]
    check_step(p, 0)


@pytest.mark.parametrize("seed", range(6))
def test_random_tiny_pipelines(seed: int) -> None:
    p = bp.generate_pipeline(seed, 10, TINY, keep_data=True, max_pairs=20_000)
    assert len(p.steps) == 10
    assert [a.name for a in p.arrays] == [f"a{k}" for k in range(11)]
    for k in range(len(p.steps)):
        check_step(p, k)
    # The forward query path is usable by the baselines, and a full-input query reaches the
    # cells the composed lineage says it does.
    hops = p.hops("forward")
    cells = bp.box_cells(p.query_boxes()[100_000])
    assert len(cells) == TINY[0] * TINY[1]
    np.testing.assert_array_equal(NumPyBaseline(hops).query(cells), naive_join(hops, cells))
    back = p.hops("backward")
    assert back[0].source_shape == p.arrays[-1].shape


def test_generation_is_deterministic_and_seed_dependent() -> None:
    a = bp.generate_pipeline(11, 6, TINY, keep_data=True)
    b = bp.generate_pipeline(11, 6, TINY, keep_data=True)
    assert [(s.op, s.args) for s in a.steps] == [(s.op, s.args) for s in b.steps]
    assert all(s.relation == t.relation for s, t in zip(a.steps, b.steps, strict=True))
    assert a.data is not None
    assert b.data is not None
    np.testing.assert_array_equal(a.data[-1], b.data[-1])
    others = [bp.generate_pipeline(s, 6, TINY) for s in range(12, 16)]
    assert any([s.op for s in o.steps] != [s.op for s in a.steps] for o in others)


def test_max_pairs_is_respected() -> None:
    # Along the 300 rows cumsum has 4.5e6 pairs, along the 100 columns 1.5e6.
    p = bp.generate_pipeline(0, 3, (300, 100), ops=["cumsum"], max_pairs=2_000_000)
    assert all(s.args["axis"] == 1 for s in p.steps)
    assert all(s.relation.n == 300 * 5050 for s in p.steps)
    with pytest.raises(RuntimeError, match="no acceptable"):
        bp.generate_pipeline(0, 1, ops=["cumsum"], max_pairs=10, max_draws=50)


def test_icde_boxes() -> None:
    rng = np.random.default_rng(0)
    boxes = bp.icde_boxes((1000, 100), rng)
    for size, box in boxes.items():
        cells = bp.box_cells(box)
        assert len(cells) == size
        assert cells.min() >= 0
        assert (cells.max(axis=0) < [1000, 100]).all()
    assert boxes[100_000] == (slice(0, 1000), slice(0, 100))
    assert boxes[10_000][0] == slice(0, 1000)
    small = bp.icde_boxes(TINY, rng)
    assert len(bp.box_cells(small[1_000])) == TINY[0]


def test_rank_0_and_1_outputs_become_2d() -> None:
    p = bp.generate_pipeline(1, 3, TINY, ops=["ediff1d", "unique", "ravel"], keep_data=True)
    assert p.data is not None
    for k, s in enumerate(p.steps):
        assert p.arrays[k + 1].shape[1] == 1, s.op
        check_step(p, k)


def test_quick_cli_prints_a_summary() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("pipeline seed=") == 2
    assert "pairs=" in proc.stdout
    assert "(1000, 100)" in proc.stdout
