"""A small image pipeline whose assets register their lineage by hand.

It stands in for the plugin's tracked decorators (built on another branch): every asset writes
its array to the store as ``array_name(asset_key)`` with version = its run id, and its inputs
at the version of their latest materialization — exactly the naming contract the query assets
and checks rely on. The lineage is written out cell by cell from the definition of each step,
so the tests can compute expected answers independently with NumPy.

    images/raw (6×8) ──► images/smoothed (3×3 box mean, clipped) ──► images/colsum (8,)
          │                         │
          └──────────► images/hot (raw > smoothed, element-wise) ◄┘
"""

from collections.abc import Callable
from typing import Any

import dagster as dg
import numpy as np

from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.naming import array_name
from dslog_dagster.resources import DSLogResource

SHAPE = (6, 8)
RAW = dg.AssetKey(["images", "raw"])
SMOOTHED = dg.AssetKey(["images", "smoothed"])
COLSUM = dg.AssetKey(["images", "colsum"])
HOT = dg.AssetKey(["images", "hot"])


def box3(cell: tuple[int, ...]) -> list[tuple[int, int]]:
    """Input cells of a 3×3 box mean at ``cell`` (clipped at the border)."""
    i, j = cell
    return [
        (a, b)
        for a in range(max(0, i - 1), min(SHAPE[0], i + 2))
        for b in range(max(0, j - 1), min(SHAPE[1], j + 2))
    ]


def column(cell: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(i, cell[0]) for i in range(SHAPE[0])]


def same(cell: tuple[int, ...]) -> list[tuple[int, ...]]:
    return [cell]


def _upstream_version(context: dg.AssetExecutionContext, key: dg.AssetKey) -> str:
    entry = context.instance.get_latest_materialization_event(key)
    assert entry is not None, f"{key} must be materialized first"
    return entry.run_id


def register(
    context: dg.AssetExecutionContext,
    dslog: DSLogResource,
    value: np.ndarray,
    inputs: dict[dg.AssetKey, tuple[tuple[int, ...], Callable[..., Any] | None]],
) -> None:
    """Register this materialization's operation: output version = this run."""
    log: DSLog = dslog.session_for(context)
    out = Array(array_name(context.asset_key), value.shape, version=context.run.run_id)
    ins = {
        k: Array(array_name(k), shape, version=_upstream_version(context, k))
        for k, (shape, _) in inputs.items()
    }
    captures = [Lineage(out, ins[k], cap) for k, (_, cap) in inputs.items() if cap is not None]
    log.register_operation(
        f"fixture.{context.asset_key.path[-1]}", list(ins.values()), [out], captures
    )


def _output(value: np.ndarray, **extra: Any) -> dg.Output[np.ndarray]:
    return dg.Output(value, metadata={"dslog/shape": list(value.shape), **extra})


@dg.asset(key=RAW, group_name="images")
def raw(context: dg.AssetExecutionContext, dslog: DSLogResource) -> dg.Output[np.ndarray]:
    value = np.arange(np.prod(SHAPE), dtype=np.float64).reshape(SHAPE) % 7
    register(context, dslog, value, {})
    return _output(value)


@dg.asset(key=SMOOTHED, ins={"img": dg.AssetIn(RAW)}, group_name="images")
def smoothed(
    context: dg.AssetExecutionContext, dslog: DSLogResource, img: np.ndarray
) -> dg.Output[np.ndarray]:
    value = np.array(
        [[np.mean([img[c] for c in box3((i, j))]) for j in range(8)] for i in range(6)]
    )
    register(context, dslog, value, {RAW: (SHAPE, box3)})
    return _output(value)


@dg.asset(key=COLSUM, ins={"sm": dg.AssetIn(SMOOTHED)}, group_name="images")
def colsum(
    context: dg.AssetExecutionContext, dslog: DSLogResource, sm: np.ndarray
) -> dg.Output[np.ndarray]:
    value = sm.sum(axis=0)
    register(context, dslog, value, {SMOOTHED: (SHAPE, column)})
    return _output(value)


@dg.asset(key=HOT, ins={"img": dg.AssetIn(RAW), "sm": dg.AssetIn(SMOOTHED)}, group_name="images")
def hot(
    context: dg.AssetExecutionContext, dslog: DSLogResource, img: np.ndarray, sm: np.ndarray
) -> dg.Output[np.ndarray]:
    value = (img > sm).astype(np.float64)
    register(context, dslog, value, {RAW: (SHAPE, same), SMOOTHED: (SHAPE, same)})
    return _output(value)


PIPELINE = [raw, smoothed, colsum, hot]
