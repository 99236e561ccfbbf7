"""The ICDE relational pipeline end to end: forward and backward queries against a brute-force
reference (ids propagated by hand through the five steps) and the naive join."""

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
from frame_reference import output_rows

from dslog_dagster.core.api import DSLog
from dslog_dagster.core.testing.baselines import naive_join
from dslog_dagster.spark import ROW_ID, with_row_id

ROOT = Path(__file__).resolve().parents[2]
PATH = ["final", "encoded", "summed", "clean", "joined"]


def _load() -> Any:
    spec = importlib.util.spec_from_file_location(
        "relational_pipeline", ROOT / "example_project" / "relational_pipeline.py"
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_relational_pipeline_queries_match_the_reference(spark: Any, tmp_path: Path) -> None:
    rp = _load()
    basics, episodes = rp.make_tables(spark, 60, seed=3)
    b_ids, e_ids = with_row_id(basics), with_row_id(episodes)
    log = DSLog(tmp_path / "store")
    run = rp.run_pipeline(spark, log, b_ids.frame, e_ids.frame)
    final = run.captures["final"]
    bid = {r["tconst"]: r[ROW_ID] for r in b_ids.frame.collect()}
    eid = {r["tconst"]: r[ROW_ID] for r in e_ids.frame.collect()}
    b_cols = run.captures["joined"].inputs[0].columns
    e_cols = run.captures["joined"].inputs[1].columns
    rows = output_rows(final)
    # brute force: which titles survive (inner join, then no nulls)
    b_rows = {r["tconst"]: r for r in basics.collect()}
    e_rows = {r["tconst"]: r for r in episodes.collect()}
    survivors = sorted(
        t
        for t in e_rows
        if t in b_rows
        and None not in b_rows[t].asDict().values()
        and None not in e_rows[t].asDict().values()
    )
    assert sorted(r["tconst"] for r in rows) == survivors
    cols = final.columns
    for row in rows[:8]:
        o, t = row[ROW_ID], row["tconst"]
        # backward: one-hot cell <- the genres cell of the title's basics row
        for g in rp.GENRES:
            got = log.prov_query([*PATH, "basics"], [(o, cols.index(f"genre_{g}"))])
            assert got.to_indices().tolist() == [[bid[t], b_cols.index("genres")]]
            assert log.prov_query([*PATH, "episodes"], [(o, cols.index(f"genre_{g}"))]).is_empty()
        got = log.prov_query([*PATH, "episodes"], [(o, cols.index("seasonEpisode"))])
        want = sorted(
            [[eid[t], e_cols.index("seasonNumber")], [eid[t], e_cols.index("episodeNumber")]]
        )
        assert got.to_indices().tolist() == want
        got = log.prov_query([*PATH, "basics"], [(o, cols.index("runtimeMinutes"))])
        assert got.to_indices().tolist() == [[bid[t], b_cols.index("runtimeMinutes")]]
        # forward: the genres cell reaches every one-hot cell of the title's output row
        fwd = log.prov_query(["basics", *reversed(PATH)], [(bid[t], b_cols.index("genres"))])
        assert fwd.to_indices().tolist() == [[o, cols.index(f"genre_{g}")] for g in rp.GENRES]
    # and the whole path equals the naive join of the decompressed relations
    rels = []
    for out, cap in [(n, run.captures[n]) for n in PATH]:
        rels.append((cap.relation("basics" if out == "joined" else 0), "backward"))
    cells = np.asarray([(r[ROW_ID], j) for r in rows[:5] for j in range(len(cols))])
    want_all = naive_join(rels, cells)
    got_all = log.prov_query([*PATH, "basics"], cells)
    assert got_all.to_indices().tolist() == want_all.tolist()
    fwd_cells = want_all[:7]
    fwd_want = naive_join([(r, "forward") for r, _ in reversed(rels)], fwd_cells)
    fwd_got = log.prov_query(["basics", *reversed(PATH)], fwd_cells)
    assert fwd_got.to_indices().tolist() == fwd_want.tolist()
