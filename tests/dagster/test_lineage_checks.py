"""Lineage checks pass on good lineage and fail, with the documented severity and a useful
description, on missing, unreadable, mis-shaped and incomplete lineage."""

from pathlib import Path

import dagster as dg
import numpy as np

from dslog_dagster.assets import lineage_checks
from dslog_dagster.assets.checks import CHECK_COVERAGE, CHECK_READABLE, CHECK_SHAPE
from dslog_dagster.core.api import DSLog
from dslog_dagster.naming import array_name
from dslog_dagster.resources import DSLogResource
from tests.dagster.pipeline import PIPELINE, RAW, SHAPE, SMOOTHED, box3, register


@dg.asset(key="untracked", ins={"img": dg.AssetIn(RAW)})
def untracked(img: np.ndarray) -> np.ndarray:
    return img * 2  # registers no lineage


@dg.asset(key="narrowed", ins={"img": dg.AssetIn(RAW)})
def narrowed(
    context: dg.AssetExecutionContext, dslog: DSLogResource, img: np.ndarray
) -> dg.Output[np.ndarray]:
    register(context, dslog, img.copy(), {RAW: (SHAPE, lambda c: [c])})
    value = img[:, :-1]  # the value that is stored is narrower than the lineage says
    return dg.Output(value, metadata={"dslog/shape": list(value.shape)})


def _row0_constant(cell: tuple[int, ...]) -> list[tuple[int, int]]:
    return [] if cell[0] == 0 else box3(cell)


@dg.asset(key="bordered", ins={"img": dg.AssetIn(RAW)})
def bordered(
    context: dg.AssetExecutionContext, dslog: DSLogResource, img: np.ndarray
) -> np.ndarray:
    value = img.copy()
    value[0] = 0.0  # constant row: no lineage
    register(context, dslog, value, {RAW: (SHAPE, _row0_constant)})
    return value


@dg.asset(key="bordered_declared", ins={"img": dg.AssetIn(RAW)})
def bordered_declared(
    context: dg.AssetExecutionContext, dslog: DSLogResource, img: np.ndarray
) -> dg.Output[np.ndarray]:
    value = img.copy()
    value[0] = 0.0
    register(context, dslog, value, {RAW: (SHAPE, _row0_constant)})
    return dg.Output(value, metadata={"dslog/constant_cells": dg.MetadataValue.json(["0"])})


def _evaluations(
    instance: dg.DagsterInstance, store_dir: str, assets: list, checks: list, **kw: object
) -> dict[tuple[str, str], dg.AssetCheckEvaluation]:
    res = dg.materialize(
        [*assets, *checks],
        instance=instance,
        resources={"dslog": DSLogResource(store_dir=store_dir)},
        **kw,
    )
    assert res.success  # checks never fail the run (non-blocking)
    return {
        (e.asset_key.to_user_string(), e.check_name): e for e in res.get_asset_check_evaluations()
    }


def test_checks_pass_on_good_lineage(instance, store_dir) -> None:
    # images/raw is a source (no upstream asset): given as a definition it gets no checks;
    # named by key it is checked, and an operation without inputs passes
    assert not [c for c in lineage_checks(PIPELINE) if RAW in {s.asset_key for s in c.check_specs}]
    checks = [*lineage_checks(PIPELINE), *lineage_checks(["images/raw"])]
    ev = _evaluations(instance, store_dir, PIPELINE, checks)
    assert len(ev) == 12
    failed = {k: e.description for k, e in ev.items() if not e.passed}
    assert failed == {}
    cov = ev[("images/smoothed", CHECK_COVERAGE)]
    assert cov.metadata["dslog/cells_without_lineage"].value == 0
    assert cov.metadata["dslog/cells"].value == SHAPE[0] * SHAPE[1]
    assert "Source asset" in ev[("images/raw", CHECK_COVERAGE)].description
    shape = ev[("images/hot", CHECK_SHAPE)]
    assert shape.metadata["dslog/shape_source"].value == "dslog/shape"
    readable = ev[("images/hot", CHECK_READABLE)]
    assert readable.metadata["dslog/tables"].value == 2
    # hot ← raw and hot ← smoothed are element-wise: one pair per cell each
    assert readable.metadata["dslog/pairs"].value == 2 * SHAPE[0] * SHAPE[1]


def test_missing_lineage_is_an_error(instance, store_dir) -> None:
    ev = _evaluations(instance, store_dir, [PIPELINE[0], untracked], lineage_checks([untracked]))
    for name in (CHECK_READABLE, CHECK_SHAPE, CHECK_COVERAGE):
        e = ev[("untracked", name)]
        assert not e.passed
        assert e.severity == dg.AssetCheckSeverity.ERROR
        assert "has no lineage: its IO manager records none" in e.description
        assert "DSLogIOManager or with_lineage" in e.description
        assert e.metadata["dslog/array"].value == "untracked"


def _segment_of(store_dir: str, name: str) -> Path:
    log = DSLog(store_dir)
    (op,) = [op for op in log.store.operations() if any(o.name == name for o in op.outputs)]
    return Path(store_dir, "operations", f"{op.op_id}.parquet")


def test_unreadable_lineage_is_an_error(instance, store_dir) -> None:
    checks = lineage_checks([SMOOTHED])
    ev = _evaluations(instance, store_dir, PIPELINE, checks)
    assert ev[("images/smoothed", CHECK_READABLE)].passed
    seg = _segment_of(store_dir, array_name(SMOOTHED))
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])  # a torn file
    ev = _evaluations(
        instance,
        store_dir,
        PIPELINE,
        checks,
        selection=dg.AssetSelection.checks_for_assets(SMOOTHED),
    )
    e = ev[("images/smoothed", CHECK_READABLE)]
    assert not e.passed
    assert e.severity == dg.AssetCheckSeverity.ERROR
    assert "unreadable" in e.description


def test_deleted_lineage_is_an_error(instance, store_dir) -> None:
    checks = lineage_checks([SMOOTHED])
    _evaluations(instance, store_dir, PIPELINE, checks)
    _segment_of(store_dir, array_name(SMOOTHED)).unlink()
    ev = _evaluations(
        instance,
        store_dir,
        PIPELINE,
        checks,
        selection=dg.AssetSelection.checks_for_assets(SMOOTHED),
    )
    e = ev[("images/smoothed", CHECK_READABLE)]
    assert not e.passed
    assert e.severity == dg.AssetCheckSeverity.ERROR


def test_shape_mismatch_is_an_error(instance, store_dir) -> None:
    ev = _evaluations(instance, store_dir, [PIPELINE[0], narrowed], lineage_checks([narrowed]))
    e = ev[("narrowed", CHECK_SHAPE)]
    assert not e.passed
    assert e.severity == dg.AssetCheckSeverity.ERROR
    assert "materialized shape (6, 7) ≠ stored shape (6, 8)" in e.description
    assert ev[("narrowed", CHECK_READABLE)].passed


def test_coverage_gap_warns_unless_declared_constant(instance, store_dir) -> None:
    assets = [PIPELINE[0], bordered, bordered_declared]
    ev = _evaluations(
        instance,
        store_dir,
        assets,
        [
            *lineage_checks([bordered, bordered_declared]),
        ],
    )
    gap = ev[("bordered", CHECK_COVERAGE)]
    assert not gap.passed
    assert gap.severity == dg.AssetCheckSeverity.WARN
    assert gap.metadata["dslog/cells_without_lineage"].value == SHAPE[1]
    assert "data:image/png;base64," in gap.metadata["dslog/uncovered_picture"].value
    assert gap.metadata["dslog/uncovered_preview"].value.records[0].data["stop_1"] == SHAPE[1]
    ok = ev[("bordered_declared", CHECK_COVERAGE)]
    assert ok.passed, ok.description
    assert ok.metadata["dslog/constant_cells_declared"].value == SHAPE[1]


def test_coverage_constants_from_the_factory_and_error_severity(instance, store_dir) -> None:
    declared = lineage_checks([bordered], constant_cells={"bordered": ["0"]})
    ev = _evaluations(instance, store_dir, [PIPELINE[0], bordered], declared)
    assert ev[("bordered", CHECK_COVERAGE)].passed
    strict = lineage_checks([bordered], coverage_severity=dg.AssetCheckSeverity.ERROR)
    ev = _evaluations(instance, store_dir, [PIPELINE[0], bordered], strict)
    e = ev[("bordered", CHECK_COVERAGE)]
    assert not e.passed
    assert e.severity == dg.AssetCheckSeverity.ERROR
