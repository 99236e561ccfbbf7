"""The package layout the project's owner asked for: one import root, a Dagster-free core."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_core_imports_without_dagster_spark_or_pandas() -> None:
    code = (
        "import sys, dslog_dagster.core, dslog_dagster.core.format;"
        "bad = [m for m in ('dagster', 'pyspark', 'pandas') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_subpackages_live_under_the_import_root() -> None:
    import dslog_dagster.assets
    import dslog_dagster.core
    import dslog_dagster.io_managers

    assert Path(dslog_dagster.core.__file__).parent == ROOT / "core"
    assert Path(dslog_dagster.io_managers.__file__).parent == ROOT / "io_managers"
    assert Path(dslog_dagster.assets.__file__).parent == ROOT / "assets"


def test_ruff_bans_bare_top_level_imports(tmp_path: Path) -> None:
    probe = ROOT / "tests" / "_probe_banned_import.py"
    probe.write_text("import core  # noqa: F401\n")
    try:
        res = subprocess.run(
            [str(Path(sys.executable).parent / "ruff"), "check", "--no-cache", str(probe)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
    finally:
        probe.unlink()
    assert res.returncode != 0
    assert "TID251" in res.stdout


def test_version_matches_the_distribution() -> None:
    from importlib.metadata import version

    import dslog_dagster

    assert dslog_dagster.__version__ == version("dslog-dagster")
