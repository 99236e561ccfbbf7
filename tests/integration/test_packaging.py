"""A wheel built from the tree holds the right layout and works without the source tree."""

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_wheel_layout_and_import(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("dslog_dagster-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dslog_dagster/core/provrc.py" in names
    assert "dslog_dagster/io_managers/__init__.py" in names
    assert "dslog_dagster/assets/__init__.py" in names
    assert any(n.startswith("dslog_dagster/_native.") and n.endswith(".so") for n in names)
    assert not [
        n for n in names if n.split("/")[0] in {"core", "assets", "io_managers", "native", "tests"}
    ]
    assert not [n for n in names if n.endswith((".cpp", ".hpp"))]
    # Import from the unpacked wheel alone: -S skips the editable install's .pth finder.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    deps = sysconfig.get_paths()["purelib"]
    code = (
        "import numpy as np, dslog_dagster, dslog_dagster.core as c;"
        f"assert dslog_dagster.__file__.startswith({str(site)!r}), dslog_dagster.__file__;"
        "r = c.LineageRelation.from_columns((4,), (4,), [np.arange(4)], [np.arange(4)]);"
        "assert c.compress(r).decompress() == r;"
        "import importlib.util as u; assert u.find_spec('core') is None"
    )
    subprocess.run(
        [sys.executable, "-S", "-c", code],
        check=True,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{site}:{deps}", "PATH": "/usr/bin:/bin"},
    )
