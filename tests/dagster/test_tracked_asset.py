"""@tracked_asset / @tracked_multi_asset / @tracked_op materialized in-process."""

import re
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
from recorded import recorded

from dslog_dagster import (
    DSLogIOManager,
    DSLogResource,
    tracked_asset,
    tracked_multi_asset,
    tracked_op,
    with_lineage,
)
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import LineageLostError, LineageStorageError, UnsupportedArrayError
from dslog_dagster.io_managers import lineage_picture
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.tracked_step import peek_pending

# ------------------------------------------------------------------ a small pipeline


class ScaleConfig(dg.Config):
    k: float = 2.0


@tracked_asset
def src() -> np.ndarray:
    return np.arange(12.0).reshape(3, 4)


@tracked_asset(code_version="v1")
def colsum(context: dg.AssetExecutionContext, config: ScaleConfig, src: np.ndarray) -> np.ndarray:
    return src.sum(axis=0) * config.k


@tracked_asset(ins={"c": dg.AssetIn(key="colsum")})
def rev(c: np.ndarray) -> np.ndarray:
    return np.flip(c)[:3]


def _md(res: dg.ExecuteInProcessResult, node: str, key: str | None = None) -> dict[str, Any]:
    mats = res.asset_materializations_for_node(node)
    if key is not None:
        mats = [x for x in mats if x.asset_key.to_user_string() == key]
    return {k: v.value for k, v in mats[0].metadata.items()}


def _cells(log: DSLog, path: list[str], cells: object) -> set[tuple[int, ...]]:
    return {tuple(r) for r in log.prov_query(path, cells).to_indices().tolist()}


def test_materialize_twice_new_version_and_queries_equal_hand_lineage(
    instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path
) -> None:
    runs = []
    for k in (2.0, 3.0):
        res = dg.materialize(
            [src, colsum, rev],
            instance=instance,
            resources={"io_manager": io},
            run_config=dg.RunConfig(ops={"colsum": ScaleConfig(k=k)}),
        )
        runs.append(res)
        assert (
            res.output_for_node("colsum").tolist()
            == (np.arange(12.0).reshape(3, 4).sum(0) * k).tolist()
        )
    r1, r2 = runs
    md = _md(r2, "colsum")
    assert md[m.OBTAINED] == "captured"
    rec = recorded(store_dir, md)
    assert rec["version"] == r2.run_id
    assert rec["inputs"] == {"src": r2.run_id}
    # the UI shows the record as markdown
    assert f"`colsum` version `{r2.run_id}` by `colsum@v1`" in md[m.RECORD]
    assert f"**Inputs** `src` version `{r2.run_id}`" in md[m.RECORD]
    # DPDS kinds by the NumPy rule: a column sum fits none; rev keeps 3 of 4 cells, each once
    assert "**Kinds** unknown" in md[m.RECORD]
    assert "**Kinds** instance_drop; rows -1 +0" in _md(r2, "rev")[m.RECORD]
    # lean metadata: at most five dslog/* entries, figures formatted with units
    assert len([k for k in md if k.startswith("dslog/")]) <= 5
    figures = m.record_figures(md[m.RECORD])
    assert figures["lineage pairs"] == "12 (288 B as int64 columns)"  # 12 pairs * 3 ints * 8
    op = DSLog(store_dir).store.get_operation(md[m.OP_ID])
    stored_bytes = sum(t.stored_bytes for t in op.tables)
    assert figures["stored"].startswith(f"{sum(t.rows for t in op.tables):,} rows, ")
    assert f"ratio {m.format_ratio(288 / stored_bytes)}" in figures["stored"]
    assert re.fullmatch(
        r"capture [0-9.,]+ s, write [0-9.,]+ s, \d+% of the step", figures["seconds"]
    )
    assert figures["reuse signature"] not in ("", "`none`")  # the reuse key this capture fed
    assert figures["store"] == "`.dslog`"  # relative to the value directory, no machine path
    assert str(store_dir) not in md[m.RECORD]
    assert rec["op_name"] == "colsum@v1"
    assert "data:image/png;base64," in md[m.LINEAGE]
    log = DSLog(store_dir)
    ops = log.store.operations("colsum@v1")
    assert [op.args for op in ops] == [{"config": {"k": 2.0}}, {"config": {"k": 3.0}}]
    assert {op.outputs[0].version for op in ops} == {r1.run_id, r2.run_id}
    # by hand: rev[i] = colsum[3 - i] = k * sum_r src[r, 3 - i]
    for i in range(3):
        assert _cells(log, ["rev", "colsum", "src"], [i]) == {(r, 3 - i) for r in range(3)}
    assert _cells(log, ["src", "colsum", "rev"], [(1, 2)]) == {(1,)}  # forward
    # the first run's versions stay queryable
    assert log.store.get_array("rev", r1.run_id).shape == (3,)


def test_repeated_runs_take_lineage_from_reuse_views_equal_to_capture(
    instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path
) -> None:
    obtained: list[dict[str, str]] = []
    pictures: list[str] = []
    for _ in range(4):
        res = dg.materialize([src, colsum, rev], instance=instance, resources={"io_manager": io})
        obtained.append({n: _md(res, n)[m.OBTAINED] for n in ("colsum", "rev")})
        pictures.append(_md(res, "colsum")[m.LINEAGE])
    assert obtained[0] == {"colsum": "captured", "rev": "captured"}
    assert obtained[-1]["colsum"] in ("base", "dim", "gen")
    assert obtained[-1]["rev"] in ("base", "dim", "gen")
    served = _md(res, "colsum")  # a served step is as lean as a captured one
    assert len([k for k in served if k.startswith("dslog/")]) <= 5
    assert m.record_figures(served[m.RECORD])["lineage pairs"].startswith("12 (")
    # the served view's tables draw the same picture as the captured relation
    assert "data:image/png;base64," in pictures[0]
    assert pictures[-1] == pictures[0]
    # a served view stores exactly the lineage a capture stored
    log = DSLog(store_dir)
    ops = log.store.operations("colsum@v1")
    assert ops[0].capture_method == "annotator"
    assert ops[-1].capture_method.startswith("reuse-")
    first = log.store.read_lineage(ops[0], "colsum", "src").decompress()
    last = log.store.read_lineage(ops[-1], "colsum", "src").decompress()
    assert first == last
    for i in range(3):
        assert _cells(log, ["rev", "colsum", "src"], [i]) == {(r, 3 - i) for r in range(3)}


def test_reuse_only_serves_confirmed_views_and_records_nothing_without_one(
    instance: dg.DagsterInstance, io: DSLogIOManager
) -> None:
    only = DSLogIOManager(base_dir=io.base_dir, store_dir=io.dslog.store_dir, policy="reuse_only")
    res = dg.materialize([src, colsum], instance=instance, resources={"io_manager": only})
    md = _md(res, "colsum")
    assert md[m.OBTAINED] == "none"
    assert "no confirmed reuse view" in md[m.RECORD]
    for _ in range(3):  # captures confirm a view
        dg.materialize([src, colsum], instance=instance, resources={"io_manager": io})
    res = dg.materialize([src, colsum], instance=instance, resources={"io_manager": only})
    assert _md(res, "colsum")[m.OBTAINED] in ("base", "dim", "gen")


def test_cross_run_upstream_resolves_to_the_producing_run(
    instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path
) -> None:
    r1 = dg.materialize([src, colsum], instance=instance, resources={"io_manager": io})
    r2 = dg.materialize(
        [src, colsum], selection=[colsum], instance=instance, resources={"io_manager": io}
    )
    rec = recorded(store_dir, _md(r2, "colsum"))
    assert rec["inputs"] == {"src": r1.run_id}
    assert rec["version"] == r2.run_id


# ------------------------------------------------------------------ partitions

parts = dg.StaticPartitionsDefinition(["a", "b"])


@tracked_asset(partitions_def=parts)
def praw(context: dg.AssetExecutionContext) -> np.ndarray:
    return np.full((2, 3), 1.0 if context.partition_key == "a" else 2.0)


@tracked_asset(partitions_def=parts)
def pscaled(context: dg.AssetExecutionContext, praw: np.ndarray, src: np.ndarray) -> np.ndarray:
    return praw.T[:, :1] * src[0, :2]  # (3, 1) * (2,) -> (3, 2)


def test_partitions_named_per_partition_with_unpartitioned_upstream(
    instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path
) -> None:
    r0 = dg.materialize([src], instance=instance, resources={"io_manager": io})
    for pk in ("a", "b"):
        res = dg.materialize(
            [src, praw, pscaled],
            selection=[praw, pscaled],
            partition_key=pk,
            instance=instance,
            resources={"io_manager": io},
        )
        md = _md(res, "pscaled")
        rec = recorded(store_dir, md)
        assert rec["array"] == f"pscaled[{pk}]"
        assert rec["inputs"] == {f"praw[{pk}]": res.run_id, "src": r0.run_id}
    log = DSLog(store_dir)
    ops = log.store.operations("pscaled")
    assert sorted(op.args["partition_key"] for op in ops) == ["a", "b"]
    # pscaled[i, j] <- praw[0, i] and src[0, j]
    assert _cells(log, ["pscaled[b]", "praw[b]"], [(2, 1)]) == {(0, 2)}
    assert _cells(log, ["pscaled[a]", "src"], [(2, 1)]) == {(0, 1)}


# ------------------------------------------------------------------ multi-assets, checks


@tracked_multi_asset(
    outs={"lo": dg.AssetOut(code_version="2"), "hi": dg.AssetOut()},
)
def halves(src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return src[:, :2], src[:, 2:].max(axis=1)


@tracked_asset(check_specs=[dg.AssetCheckSpec("positive", asset="shifted")])
def shifted(src: np.ndarray) -> Any:
    out = src + 1.0
    yield dg.Output(out)
    yield dg.AssetCheckResult(passed=bool(np.all(out > 0)))


def test_multi_asset_and_generator_with_check(
    instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path
) -> None:
    res = dg.materialize([src, halves, shifted], instance=instance, resources={"io_manager": io})
    assert res.output_for_node("halves", "hi").tolist() == [3.0, 7.0, 11.0]
    assert recorded(store_dir, _md(res, "halves", "lo"))["op_name"] == "lo@2"
    assert m.record_figures(_md(res, "halves", "hi")[m.RECORD])["lineage pairs"].startswith("3 (")
    assert res.get_asset_check_evaluations()[0].passed
    log = DSLog(store_dir)
    assert _cells(log, ["lo", "src"], [(1, 1)]) == {(1, 1)}
    assert _cells(log, ["hi", "src"], [2]) == {(2, 3)}  # max picks one cell (contributing)
    assert _cells(log, ["shifted", "src"], [(0, 3)]) == {(0, 3)}


# ------------------------------------------------------------------ ops in a graph


@tracked_op
def make() -> np.ndarray:
    return np.arange(6.0)


@tracked_op
def double(x: np.ndarray) -> np.ndarray:
    return x * 2


@tracked_op(out={"a": dg.Out(), "b": dg.Out()})
def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x[:3], np.cumsum(x[3:])


@dg.graph
def op_pipeline() -> None:
    split(double(make()))


def test_ops_in_a_graph(instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path) -> None:
    job = op_pipeline.to_job(resource_defs={"io_manager": io})
    res = job.execute_in_process(instance=instance)
    assert res.output_for_node("split", "b").tolist() == [6.0, 14.0, 24.0]
    log = DSLog(store_dir)
    assert _cells(log, ["split:b", "double:result", "make:result"], [1]) == {(3,), (4,)}
    assert _cells(log, ["make:result", "double:result", "split:a"], [(2,)]) == {(2,)}


# ------------------------------------------------------------------ failures


@tracked_asset
def broken(src: np.ndarray) -> np.ndarray:
    msg = "user code failed"
    raise ValueError(msg)


def test_user_code_failure_writes_no_lineage(
    instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path
) -> None:
    res = dg.materialize(
        [src, broken], instance=instance, resources={"io_manager": io}, raise_on_error=False
    )
    assert not res.success
    assert "user code failed" in str(res.get_step_failure_events()[0].step_failure_data.error)
    assert peek_pending(res.run_id, "broken", "result") is None
    log = DSLog(store_dir)
    assert log.store.operations("broken") == []
    assert [a.name for a in log.store.arrays()] == ["src"]


def test_lineage_write_failure_fails_the_step(instance: dg.DagsterInstance, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    io = DSLogIOManager(base_dir=str(tmp_path / "data"), store_dir=str(blocker / "store"))
    res = dg.materialize(
        [src, colsum], instance=instance, resources={"io_manager": io}, raise_on_error=False
    )
    assert not res.success
    err = res.get_step_failure_events()[0].step_failure_data.error
    text = str(err) + "".join(str(c) for c in _causes(err))
    assert LineageStorageError.__name__ in text
    assert "Could not create the store's folders" in text
    assert "is a file, not a folder" in text
    assert res.get_asset_materialization_events() == []


def _causes(err: Any) -> list[Any]:
    out = []
    while err is not None:
        out.append(err)
        err = err.cause
    return out


# ------------------------------------------------------------------ policies


@tracked_asset
def grad(src: np.ndarray) -> np.ndarray:
    # positions of a combined mask (`&` is control) carry no lineage: it would be lost
    return np.argwhere((src > 5.0) & (src < 1e9))


@tracked_asset(policy="all_to_all")
def grad_flagged(src: np.ndarray) -> np.ndarray:
    return np.argwhere((src > 5.0) & (src < 1e9))


@tracked_asset(policy="off")
def grad_off(src: np.ndarray) -> np.ndarray:
    return np.argwhere((src > 5.0) & (src < 1e9))


@tracked_asset(policy="reuse_only")
def neg_reuse(src: np.ndarray) -> np.ndarray:
    return -src


def test_capture_policy_fails_loudly_when_lineage_would_be_lost(
    instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path
) -> None:
    res = dg.materialize(
        [src, grad], instance=instance, resources={"io_manager": io}, raise_on_error=False
    )
    assert not res.success
    assert LineageLostError.__name__ in str(
        res.get_step_failure_events()[0].step_failure_data.error
    )
    assert DSLog(store_dir).store.operations("grad") == []


def test_policies_all_to_all_off_reuse_only(
    instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path
) -> None:
    res = dg.materialize(
        [src, grad_flagged, grad_off, neg_reuse], instance=instance, resources={"io_manager": io}
    )
    want = np.argwhere(np.arange(12.0).reshape(3, 4) > 5.0)  # 6 x 2 int64 indices
    for node in ("grad_flagged", "grad_off"):  # the fallback keeps the function's dtype
        got = res.output_for_node(node)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
        with (Path(io.base_dir) / node).with_suffix(".npy").open("rb") as f:
            stored = np.load(f)
        assert stored.dtype == np.int64
        np.testing.assert_array_equal(stored, want)
    flagged = _md(res, "grad_flagged")
    assert flagged[m.OBTAINED] == m.ALL_TO_ALL
    assert "**Flagged**" in flagged[m.RECORD]
    assert "int64" in flagged[m.RECORD]
    assert m.record_figures(flagged[m.RECORD])["lineage pairs"].startswith(f"{12 * 12} (")
    off = _md(res, "grad_off")
    assert off[m.OBTAINED] == "off"
    assert m.OP_ID not in off
    reuse = _md(res, "neg_reuse")
    assert reuse[m.OBTAINED] == "none"
    assert "no confirmed reuse view" in reuse[m.RECORD]
    log = DSLog(store_dir)
    (op,) = log.store.operations("grad_flagged")
    assert op.capture_method == "all-to-all"
    assert op.outputs[0].dtype == "int64"
    assert log.store.operations("grad_off") == []
    assert log.store.operations("neg_reuse") == []
    assert _cells(log, ["grad_flagged", "src"], [(0, 0)]) == {
        (i, j) for i in range(3) for j in range(4)
    }


def test_resource_default_policy_applies(instance: dg.DagsterInstance, tmp_path: Path) -> None:
    io = DSLogIOManager.from_resource(DSLogResource(policy="off"), base_dir=str(tmp_path))
    res = dg.materialize([src, colsum], instance=instance, resources={"io_manager": io})
    assert _md(res, "colsum")[m.OBTAINED] == "off"


def test_durable_setting_reaches_the_store_and_lineage_is_stored_either_way(
    instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    for durable in (False, True):
        base = tmp_path / str(durable)
        dslog = DSLogResource(durable=durable, store_dir=str(base / ".dslog"))
        io = DSLogIOManager.from_resource(dslog, base_dir=str(base))
        res = dg.materialize([src, colsum], instance=instance, resources={"io_manager": io})
        assert _md(res, "colsum")[m.OBTAINED] == "captured"
        assert io.dslog_settings().store().durable is durable
        log = DSLog(base / ".dslog")
        assert _cells(log, ["colsum", "src"], [0]) == {(r, 0) for r in range(3)}


# ------------------------------------------------------------------ inputs


@dg.asset(io_manager_key="fs")
def listy() -> list[float]:
    return [1.0, 2.0]


@tracked_asset
def uses_list(listy: list[float], src: np.ndarray) -> np.ndarray:
    return src * 2


@tracked_asset(untracked_inputs={"listy"})
def uses_list_untracked(listy: list[float], src: np.ndarray) -> np.ndarray:
    return src * len(listy)


def test_unsupported_input_is_an_error_unless_declared_untracked(
    instance: dg.DagsterInstance, io: DSLogIOManager, tmp_path: Path, store_dir: Path
) -> None:
    resources = {"io_manager": io, "fs": dg.FilesystemIOManager(base_dir=str(tmp_path / "fs"))}
    res = dg.materialize(
        [src, listy, uses_list], instance=instance, resources=resources, raise_on_error=False
    )
    err = str(res.get_step_failure_events()[0].step_failure_data.error)
    assert UnsupportedArrayError.__name__ in err
    assert "untracked_inputs={'listy'}" in err
    res = dg.materialize([src, listy, uses_list_untracked], instance=instance, resources=resources)
    assert recorded(store_dir, _md(res, "uses_list_untracked"))["inputs"] == {"src": res.run_id}
    assert _cells(DSLog(store_dir), ["uses_list_untracked", "src"], [(2, 2)]) == {(2, 2)}


def test_with_lineage_wraps_an_existing_io_manager(
    instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    io = with_lineage(dg.FilesystemIOManager(base_dir=str(tmp_path / "fs")))
    res = dg.materialize([src, colsum, rev], instance=instance, resources={"io_manager": io})
    md = _md(res, "rev")
    # the resource's store (the instance's storage), not one under the inner base_dir
    store = Path(instance.storage_directory()) / ".dslog"
    assert not (tmp_path / "fs" / ".dslog").exists()
    assert str(store) not in md[m.RECORD]  # no machine paths in the metadata
    assert recorded(store, md)["array"] == "rev"  # the operation is in that store
    assert (tmp_path / "fs" / "rev").exists()  # the inner IO manager stored the value
    assert _cells(DSLog(store), ["rev", "colsum", "src"], [0]) == {(r, 3) for r in range(3)}


def test_plain_io_manager_tracks_nothing_and_says_so(
    instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    res = dg.materialize(
        [src, colsum],
        instance=instance,
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path))},
    )
    assert res.success
    logs = [
        e.message
        for e in instance.all_logs(res.run_id)
        if "do not store lineage" in (e.message or "")
    ]
    assert logs


def test_direct_invocation_runs_the_plain_function() -> None:
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    out = rev(c=x[0])
    assert out.dtype == np.int64
    assert out.tolist() == [3, 2, 1]
    assert double(np.arange(3.0)).tolist() == [0.0, 2.0, 4.0]


class SizeConfig(dg.Config):
    n: int = 4


@tracked_asset
def square(config: SizeConfig) -> np.ndarray:
    return np.arange(float(config.n * config.n)).reshape(config.n, config.n)


@tracked_asset
def below(square: np.ndarray) -> np.ndarray:
    return square[1:] - square[:-1]


def test_cached_pictures_of_served_steps_always_match_the_stored_lineage(
    instance: dg.DagsterInstance, io: DSLogIOManager, store_dir: Path
) -> None:
    """The picture of a served step comes from a cache keyed by the tables' digests: it must
    be the fresh drawing of the lineage stored for that very materialization, also when the
    shapes (and so the lineage) change between runs."""
    m.clear_picture_cache()
    log = DSLog(store_dir)
    seen: dict[int, str] = {}
    for n in (4, 4, 4, 6, 6, 4):
        cfg = {"ops": {"square": {"config": {"n": n}}}}
        res = dg.materialize(
            [square, below], instance=instance, resources={"io_manager": io}, run_config=cfg
        )
        md = _md(res, "below")
        op = log.store.get_operation(md[m.OP_ID])
        stored = log.store.read_lineage(op, "below", "square")
        fresh = lineage_picture._render_markdown(
            "below",
            (n - 1, n),
            [("square", stored.decompress())],
            4,
            4,
            res.output_for_node("below"),
            None,
        )
        assert f"`below` version `{res.run_id}`" in md[m.RECORD]
        assert md[m.LINEAGE] == fresh
        assert seen.setdefault(n, md[m.LINEAGE]) == md[m.LINEAGE]
    assert md[m.OBTAINED] in ("base", "dim", "gen")  # the last runs were served
    assert seen[4] != seen[6]
