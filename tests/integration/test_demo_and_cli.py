"""The README's main job and the `dslog` CLI run end to end."""

import subprocess
import sys
from pathlib import Path

import pytest

from dslog_dagster.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_demo_runs_and_verifies_every_table(tmp_path: Path) -> None:
    store = tmp_path / "store"
    res = subprocess.run(
        [sys.executable, str(ROOT / "example_project" / "numpy_lineage_demo.py"), str(store)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("read back and verified") == 5
    assert "ERROR" not in res.stdout
    # the store it leaves behind is readable by the CLI
    assert main(["inspect", str(store)]) == 0


def test_cli_inspect_sql_rebuild(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    from dslog_dagster.core import LineageRelation, LineageStore

    store = LineageStore(tmp_path)
    store.register_array("x", (3,))
    store.register_array("y", (3,))
    rel = LineageRelation.from_columns((3,), (3,), [np.arange(3)], [np.arange(3)])
    store.register_operation("neg", ["x"], ["y"], {("y", "x"): rel})
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "neg(x) -> y" in out
    assert "y <- x: 3 pairs, 1 rows" in out
    assert main(["sql", str(tmp_path), "SELECT count(*) AS n FROM lineage_tables"]) == 0
    assert [line.split() for line in capsys.readouterr().out.splitlines()] == [["n"], ["1"]]
    assert main(["rebuild-catalog", str(tmp_path)]) == 0
    assert "1 operation(s)" in capsys.readouterr().out
    store.register_operation("neg", ["x"], ["y"], {("y", "x"): rel})
    assert main(["compact", str(tmp_path)]) == 0
    assert "packed 2 operation(s) from 2 file(s)" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("y <- x: 3 pairs, 1 rows") == 2


def test_cli_reports_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    assert "No lineage store" in capsys.readouterr().err


@pytest.mark.integration
def test_hotspot_demo_materializes_and_answers_by_hand(tmp_path: Path) -> None:
    import numpy as np

    from dslog_dagster.core.api import DSLog

    base = tmp_path / "hotspots"
    res = subprocess.run(
        [sys.executable, str(ROOT / "example_project" / "hotspots_demo.py"), str(base)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    # 9 tracked outputs x 4 runs on unchanged inputs: runs 3 and 4 come from base views
    assert res.stdout.count("lineage captured") == 18
    assert res.stdout.count("lineage base") == 18
    # the answer, by hand: the brightest tile peak is one thresholded cell, the box blur
    # reads its edge-clamped 3 x 3 neighbourhood, calibration is cell-wise
    thr = np.load(base / "thresholded.npy")
    top = np.load(base / "top_hotspots.npy")
    r, c = np.argwhere(thr == top[0])[0]
    n = thr.shape[0]
    want = {
        (min(max(r + dy, 0), n - 1), min(max(c + dx, 0), n - 1))
        for dy in (-1, 0, 1)
        for dx in (-1, 0, 1)
    }
    got = DSLog(base / ".dslog").prov_query(
        ["top_hotspots", "hotspots", "thresholded", "smoothed", "calibrated", "raw_frame"], [0]
    )
    assert {tuple(x) for x in got.to_indices().tolist()} == want
    assert f"<- {len(want)} cells of raw_frame" in res.stdout
    # the thesis' question: a hotspot coordinate np.argwhere returned <- the box blur's 3 x 3
    # neighbourhood of that pixel in the raw frame (edge-clamped), derived by hand
    coords = np.load(base / "hotspot_coords.npy")
    assert coords.dtype == np.int64
    np.testing.assert_array_equal(coords, np.argwhere(thr))  # values as plain NumPy's
    r, c = (int(v) for v in coords[0])
    hand = sorted(
        (min(max(r + dy, 0), n - 1), min(max(c + dx, 0), n - 1))
        for dy in (-1, 0, 1)
        for dx in (-1, 0, 1)
    )
    coord_cells = DSLog(base / ".dslog").prov_query(
        ["hotspot_coords", "thresholded", "smoothed", "calibrated", "raw_frame"], np.s_[0:1, 0:2]
    )
    assert sorted(tuple(x) for x in coord_cells.to_indices().tolist()) == hand
    line = ", ".join(f"({a}, {b})" for a, b in hand)
    assert f"np.argwhere(...)[0] = ({r}, {c}) <- 9 cells of raw_frame: {line}" in res.stdout
