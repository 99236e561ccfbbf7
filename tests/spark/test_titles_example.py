"""The example project's Spark pipeline (``titles_job``) through ``titles_demo.py``: the demo
runs, and its backward (NumPy result -> Spark source) and forward (source -> final frame)
lineage answers equal a brute-force reference computed from the stored tables."""

import sys
from pathlib import Path
from typing import Any

import pytest

from dslog_dagster.core.api import DSLog
from dslog_dagster.io_managers.spark_frames import read_frame
from dslog_dagster.spark import ROW_ID

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "example_project"))

import titles_demo
from hotspots.spark import PATH_TO_BASICS
from relational_pipeline import GENRES


def _rows(spark: Any, path: Path) -> list[Any]:
    return sorted(read_frame(spark, path, row_id=True).collect(), key=lambda r: r[ROW_ID])


@pytest.mark.filterwarnings("ignore:InitResourceContext.dagster_run is deprecated")
def test_titles_demo_answers_equal_brute_force(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "titles"
    assert titles_demo.main([str(base), "--titles", "40"]) == 0
    out = capsys.readouterr().out
    basics = _rows(spark, base / "title_basics.parquet")
    episodes = {r["tconst"]: r for r in _rows(spark, base / "title_episodes.parquet")}
    b_cols = [c for c in basics[0].asDict() if c != ROW_ID]
    survivors = {
        r["tconst"]
        for r in basics
        if r["tconst"] in episodes
        and None not in r.asDict().values()
        and None not in episodes[r["tconst"]].asDict().values()
    }
    final = _rows(spark, base / "titles_final.parquet")
    assert {r["tconst"] for r in final} == survivors
    # backward: the Drama total <- runtime and genres cells of every surviving title
    want = {
        (r[ROW_ID], b_cols.index(c))
        for r in basics
        if r["tconst"] in survivors
        for c in ("runtimeMinutes", "genres")
    }
    log = DSLog(base / ".dslog")
    got = {tuple(c) for c in log.prov_query(PATH_TO_BASICS, [1]).to_indices().tolist()}
    assert got == want
    assert f"Drama runtime total <- {len(want)} cells of title_basics" in out
    # forward: the genres cells of basics rows 0..9 reach the one-hot cells of their titles
    f_cols = [c for c in final[0].asDict() if c != ROW_ID]
    fid = {r["tconst"]: r[ROW_ID] for r in final}
    genres = b_cols.index("genres")
    fwd_want = {
        (fid[r["tconst"]], f_cols.index(f"genre_{g}"))
        for r in basics[:10]
        if r["tconst"] in survivors
        for g in GENRES
    }
    fwd = log.prov_query(list(reversed(PATH_TO_BASICS[2:])), [(i, genres) for i in range(10)])
    assert {tuple(c) for c in fwd.to_indices().tolist()} == fwd_want
    assert f"query asset genre_reach: {len(fwd_want)} cells" in out
    assert f"query asset genre_origin: {len(want)} cells" in out
