"""A representative subset of the ICDE coverage grid through the reuse bench's driver.

The full grid (139 names, 20 runs each) is ``bench/reuse_coverage.py``; here a dozen functions
run 8 times each with the same driver (random extents, fresh data, every served call compared
with a fresh capture), so CI keeps the grid path honest in a few seconds.
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dslog_dagster.core import ReusePolicy, ViewRegistry

BENCH = Path(__file__).resolve().parents[2] / "bench" / "reuse_coverage.py"

REUSABLE = ["negative", "add", "sum", "matmul", "tile", "flip", "transpose", "cumsum", "sinc"]
DATA_DEPENDENT = ["sort", "unique", "maximum", "median", "ptp"]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reuse_coverage_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", REUSABLE + DATA_DEPENDENT)
def test_grid_function_reuse(bench: ModuleType, name: str, tmp_path: Path) -> None:
    reg = ViewRegistry(tmp_path, ReusePolicy(pure=True, seed=0))
    r = bench.run_function(name, reg, runs=8, reps=4, seed=0, max_cells=2_000)
    assert r.errors == 0, f"{name}: a served view differed from a fresh capture"
    if name in REUSABLE:
        assert r.dim_reusable, f"{name} was never served from a view"
    else:
        assert not r.dim_reusable, f"{name} (data-dependent) was served from a view"


@pytest.mark.parametrize("name", ["maximum", "amax", "ptp", "sort", "unique", "median"])
def test_grid_function_reuse_of_the_considered_relation(
    bench: ModuleType, name: str, tmp_path: Path
) -> None:
    """The bench's considered pass: picks, sorts and partitions (``median`` considers its whole
    lane, as NumPy's partition compares it) consider a shape-determined set of cells, so views
    of that relation serve them, always equal to a fresh capture; ``unique`` stays
    data-dependent (its output shape follows the values)."""
    reg = ViewRegistry(tmp_path, ReusePolicy(pure=True, seed=0))
    r = bench.run_function(
        name, reg, runs=8, reps=4, seed=0, max_cells=2_000, relation="considered"
    )
    assert r.errors == 0, f"{name}: a served view differed from a fresh capture"
    assert r.dim_reusable == (name != "unique"), name
