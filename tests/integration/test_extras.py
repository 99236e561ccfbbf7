"""Packaging: a NumPy-only install works without PySpark and pandas; Spark and pandas features
name their extra; dependency ranges, not pins; no pandas warning from PySpark.

The "not installed" cases run in a subprocess whose meta-path finder hides the modules (as a
fresh ``pip install dslog-dagster`` without extras would leave them out).
"""

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = """
import sys
HIDDEN = {hidden!r}

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by the test)")
        return None

sys.meta_path.insert(0, Hide())
"""


def _run(code: str, hidden: tuple[str, ...], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = BLOCKER.format(hidden=set(hidden)) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )


@pytest.mark.integration
def test_numpy_pipeline_runs_without_pyspark_and_pandas(tmp_path: Path) -> None:
    code = f"""
    import sys
    import numpy as np
    import dagster as dg
    import dslog_dagster, dslog_dagster.core, dslog_dagster.io_managers, dslog_dagster.assets
    import dslog_dagster.cli
    from dslog_dagster import DSLogIOManager, DSLogResource, tracked_asset
    from dslog_dagster.core.api import DSLog

    @tracked_asset
    def a() -> np.ndarray:
        return np.arange(6.0)

    @tracked_asset
    def b(a: np.ndarray) -> np.ndarray:
        return np.cumsum(a)

    dslog = DSLogResource(store_dir={str(tmp_path / "d" / ".dslog")!r})
    io = DSLogIOManager(dslog=dslog, base_dir={str(tmp_path / "d")!r})
    res = dg.materialize([a, b], resources={{"io_manager": io, "dslog": dslog}})
    assert res.success
    log = DSLog({str(tmp_path / "d" / ".dslog")!r})
    assert log.prov_query(["b", "a"], [5]).to_indices().ravel().tolist() == [0, 1, 2, 3, 4, 5]
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "pandas"))
    assert not leaked, leaked
    print("ok")
    """
    done = _run(code, ("pyspark", "pandas", "dagster_pyspark"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


@pytest.mark.integration
def test_spark_and_pandas_features_name_their_extra(tmp_path: Path) -> None:
    code = """
    from dslog_dagster.errors import DSLogError, MissingExtraError
    from dslog_dagster.extras import require
    try:
        import dslog_dagster.spark
    except MissingExtraError as e:
        assert isinstance(e, DSLogError) and isinstance(e, ImportError)
        print("spark:", e)
    try:
        require("pandas", "to_pandas()")
    except MissingExtraError as e:
        print("pandas:", e)
    from dslog_dagster.core.store import LineageStore
    from dslog_dagster.export import asset_document
    store = LineageStore("s")
    store.register_array("x", (2,))
    try:
        asset_document(store, "x")
    except MissingExtraError as e:
        print("prov:", e)
    """
    done = _run(code, ("pyspark", "pandas", "prov"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("spark: Spark support (dslog_dagster.spark")
    assert lines[0].endswith("Install the extra: pip install 'dslog-dagster[spark]'.")
    assert lines[1].startswith("pandas: to_pandas() needs `pandas`")
    assert lines[1].endswith("pip install 'dslog-dagster[pandas]'.")
    assert lines[2].startswith("prov: Exporting lineage as W3C PROV needs `prov`")
    assert lines[2].endswith("pip install 'dslog-dagster[export]'.")


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["project"]  # type: ignore[no-any-return]


def test_dependencies_are_ranges_and_extras_carry_spark_and_pandas() -> None:
    project = _project()
    deps: list[str] = project["dependencies"]  # type: ignore[assignment]
    extras: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    names = [d.split(">")[0].split("<")[0].split("=")[0].split("[")[0] for d in deps]
    assert "pyspark" not in names
    assert "pandas" not in names
    every = deps + [d for reqs in extras.values() for d in reqs]
    assert not [d for d in every if "==" in d], "exact pins"
    assert any(d.startswith("dagster>=1.13") and "<1.14" in d for d in deps)
    assert any(d.startswith("pyspark>=") for d in extras["spark"])
    # PySpark 4.3 warns on every Spark run under pandas 3: the spark extra keeps pandas below
    assert "pandas>=2.2,<3" in extras["spark"]
    assert extras["pandas"] == ["pandas>=2.2"]
    test = " ".join(extras["test"])
    assert extras["export"] == ["prov>=2.0"]
    for extra in ("spark", "pandas", "ui", "docs", "export"):
        assert extra in test.split("dslog-dagster[")[1], test
    entry = project["entry-points"]["dagster_dg_cli.registry_modules"]  # type: ignore[index]
    assert entry == {"dslog_dagster": "dslog_dagster.assets.components"}


@pytest.mark.integration
def test_spark_install_gets_no_pandas_warning(tmp_path: Path) -> None:
    """The environment `make dev` installs (the test extra, with `[spark]`): PySpark's pandas
    check passes without a warning, so a Spark run prints none."""
    code = """
    import warnings
    warnings.simplefilter("error")
    from pyspark.sql.pandas.utils import require_minimum_pandas_version
    require_minimum_pandas_version()
    print("ok")
    """
    done = _run(code, (), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
