"""A new project built from the docs' snippets alone works: every check green, lineage answers.

The README and the docs pages mark the ``python`` blocks that make up a project with
``<!-- dslog-project: NAME -->`` on the line before the fence (CONTRIBUTING.md, "Docs"). For
each project, the blocks are joined in page order (README, getting started, Dagster guide) into
one ``definitions.py`` in a temporary directory — nothing added but the line numbers of the
pages, so a traceback names the page's line — and imported as a reader's project would be.
Then its ``defs`` are materialized on a test instance (every asset, the ad-hoc query with a
config naming two of the project's assets), every lineage check must pass, every saved query
must answer, and each tracked asset's lineage must lead back to its upstream assets. A broken
snippet fails here: at import, at materialization, in a check or in an answer.
"""

import importlib.util
import json
import sys
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
from docs_snippets import projects

from dslog_dagster import DSLogResource
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.query import CellSet
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.naming import array_name

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
PROJECTS = projects()


def test_the_docs_mark_projects() -> None:
    assert {"quickstart", "getting-started"} <= set(PROJECTS)
    pages = {page.name for blocks in PROJECTS.values() for page, _, _ in blocks}
    assert {"README.md", "getting-started.md", "dagster.md"} <= pages


def _module(blocks: list[tuple[Path, int, str]]) -> str:
    """The blocks as one module, each block's code at its page line (blank lines between)."""
    out: list[str] = []
    for page, line, code in blocks:
        out.append(f"# --- {page.name}, line {line}")
        out.extend(code.splitlines())
    return "\n".join(out) + "\n"


def _load(name: str, path: Path) -> object:
    spec = importlib.util.spec_from_file_location(f"docs_project_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_docs_project_runs_green_with_lineage(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSLOG_STORE", raising=False)
    path = tmp_path / "definitions.py"
    path.write_text(_module(PROJECTS[name]))
    defs = _load(name.replace("-", "_"), path).defs  # type: ignore[attr-defined]
    assert isinstance(defs, dg.Definitions)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    saved = [
        k for k in graph.get_all_asset_keys() if graph.get(k).tags.get(m.SAVED_QUERY_TAG) == "true"
    ]
    assert saved, f"project {name} declares no saved query"
    tracked = [
        k
        for k in graph.get_all_asset_keys()
        if k not in saved and k.to_user_string() != "lineage_query"
    ]
    with_deps = [k for k in tracked if graph.get(k).parent_keys]
    assert with_deps
    assert graph.asset_check_keys
    run_config: dict[str, object] = dict(QUIET)
    if "lineage_query" in keys:  # the ad-hoc query, configured as in the launchpad
        down = with_deps[0]
        up = sorted(graph.get(down).parent_keys)[0]
        run_config["ops"] = {
            "lineage_query": {
                "config": {"source": down.to_user_string(), "target": up.to_user_string()}
            }
        }
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, run_config=run_config)
        assert result.success
        checks = {
            f"{e.asset_key.to_user_string()}:{e.check_name}": (e.passed, e.description)
            for e in result.get_asset_check_evaluations()
        }
        assert len(checks) == len(graph.asset_check_keys)
        failed = {k: v for k, v in checks.items() if not v[0]}
        assert not failed, json.dumps(failed, indent=1)
        for key in saved:  # every saved query answered with some cells
            event = instance.get_latest_materialization_event(key)
            assert event is not None
            assert event.asset_materialization is not None
            cells = event.asset_materialization.metadata[m.RESULT_CELLS].value
            assert isinstance(cells, int), key
            assert cells > 0, key
        # the lineage of every tracked asset leads back to each of its upstream assets
        dslog = (defs.resources or {})["dslog"]
        assert isinstance(dslog, DSLogResource)
        log = DSLog(str(dslog.resolve_store_dir(instance.storage_directory())))
        for key in with_deps:
            out = log.store.get_array(array_name(key))
            for up in graph.get(key).parent_keys:
                back = log.lineage_between(
                    array_name(key), array_name(up), CellSet.full(out.shape), direction="backward"
                )
                assert back.count() > 0, (key, up)
                assert int(np.prod(back.shape)) >= back.count()
