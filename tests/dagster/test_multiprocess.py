"""Tracked steps under Dagster's multiprocess executor: each step runs in its own process, and
the wrapper and the IO manager of a step still meet through the step's runtime."""

from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from dslog_dagster.core.api import DSLog

TESTS = Path(__file__).resolve().parents[1]


def test_multiprocess_steps_record_their_lineage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "data"
    monkeypatch.setenv("DSLOG_MP_BASE", str(base))
    home = tmp_path / "home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        job = dg.build_reconstructable_job(
            "mp_tracked_job", "mp_job", reconstructor_working_directory=str(TESTS)
        )
        result = dg.execute_job(job, instance=instance)
        assert result.success
        steps = {e.step_key for e in result.all_events if e.is_step_success}
        assert steps == {"mp_raw", "mp_neg", "mp_pair"}
        obtained = {
            e.event_specific_data.materialization.asset_key.to_user_string(): (
                e.event_specific_data.materialization.metadata["dslog/obtained"].value
            )
            for e in result.all_events
            if e.is_step_materialization
        }
    assert obtained == {
        "mp_raw": "source",
        "mp_neg": "captured",
        "mp_twice": "captured",
        "mp_colsum": "captured",
    }
    log = DSLog(base / ".dslog")
    # colsum[1] <- neg[:, 1] <- raw[:, 1]
    cells = log.prov_query(["mp_colsum", "mp_neg", "mp_raw"], [(1,)])
    assert sorted(map(tuple, cells.to_indices().tolist())) == [(0, 1), (1, 1), (2, 1)]
    assert np.array_equal(np.load(base / "mp_twice.npy"), -2 * np.arange(12.0).reshape(3, 4))
