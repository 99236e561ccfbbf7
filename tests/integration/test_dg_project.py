"""The example project is a `dg` project: `dg list components` lists the LineageQueries
component (registered by dslog-dagster's entry point) and `dg list defs` loads the project."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project"
DG = str(Path(sys.executable).parent / "dg")


def _dg(*args: str, tmp_path: Path) -> object:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "HOTSPOTS_BASE_DIR": str(tmp_path / "d")}
    done = subprocess.run(
        [DG, *args, "--json"],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.integration
def test_dg_lists_the_lineage_queries_component(tmp_path: Path) -> None:
    listed = _dg("list", "components", tmp_path=tmp_path)
    keys = [item["key"] for item in listed["items"]]  # type: ignore[index]
    assert "dslog_dagster.assets.components.LineageQueries" in keys, keys


@pytest.mark.integration
def test_dg_loads_the_example_project(tmp_path: Path) -> None:
    defs = _dg("list", "defs", tmp_path=tmp_path)
    assets = {a["asset_key"] for a in defs["assets"]}  # type: ignore[index]
    assert {"raw_frame", "hotspots", "title_basics", "genre_runtime", "genre_origin"} <= assets
    jobs = {j["name"] for j in defs["jobs"]}  # type: ignore[index]
    assert jobs == {"hotspot_job", "titles_job", "titles_on_demand_job"}
