"""``defer=`` on the tracked decorators: a NumPy step whose code refuses deferred inputs
(``isinstance(x, np.ndarray)``) fails with the hint by default and, with ``defer=False``, is
captured (directly, through the reuse registry, and by an on-demand re-run) with the lineage
the default path gives a step both can run."""

from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import (
    DSLogIOManager,
    DSLogResource,
    tracked_asset,
    tracked_multi_asset,
    tracked_op,
)
from dslog_dagster.core import on_demand
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.errors import CaptureError, DSLogError
from dslog_dagster.io_managers import metadata as m


def _ndarray_only(x: Any) -> np.ndarray:
    """What validating user code does: anything but an ndarray is refused."""
    if not isinstance(x, np.ndarray):
        msg = f"expected an ndarray, got {type(x).__name__}"
        raise TypeError(msg)
    return x


@tracked_asset
def grid() -> np.ndarray:
    return np.arange(12.0).reshape(3, 4)


@tracked_asset
def lenient(grid: np.ndarray) -> np.ndarray:
    return grid * 2.0 + 1.0  # on the fast path: stays deferred to the end


@tracked_asset
def strict(grid: np.ndarray) -> np.ndarray:
    return _ndarray_only(grid) * 2.0 + 1.0


@tracked_asset(defer=False)
def strict_eager(grid: np.ndarray) -> np.ndarray:
    return _ndarray_only(grid) * 2.0 + 1.0


@tracked_asset(defer=False, policy="on_demand")
def strict_later(grid: np.ndarray) -> np.ndarray:
    return _ndarray_only(grid) * 2.0 + 1.0


def _io(tmp_path: Path, *, reuse: bool) -> tuple[DSLogResource, DSLogIOManager]:
    dslog = DSLogResource(store_dir=str(tmp_path / "store"), reuse=reuse)
    return dslog, DSLogIOManager(dslog=dslog, base_dir=str(tmp_path / "values"))


def _lineage(store_dir: str, op_index: int, name: str) -> LineageRelation:
    log = DSLog(store_dir)
    op = log.store.operations(name)[op_index]
    return log.store.read_lineage(op, name, "grid").decompress()


def _error_text(res: dg.ExecuteInProcessResult) -> str:
    err: Any = res.get_step_failure_events()[0].step_failure_data.error
    parts = []
    while err is not None:
        parts.append(str(err))
        err = err.cause
    return "".join(parts)


@pytest.mark.parametrize("reuse", [False, True], ids=["plain", "reuse"])
def test_a_step_that_refuses_deferred_inputs_fails_with_the_hint(
    tmp_path: Path, reuse: bool
) -> None:
    dslog, io = _io(tmp_path, reuse=reuse)
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [grid, strict],
            instance=instance,
            resources={"dslog": dslog, "io_manager": io},
            raise_on_error=False,
        )
    assert not res.success
    text = _error_text(res)
    assert CaptureError.__name__ in text
    assert "refused a deferred input" in text
    assert "`defer=False` on `@tracked_asset`" in text


@pytest.mark.parametrize("reuse", [False, True], ids=["plain", "reuse"])
def test_defer_false_captures_it_with_the_default_paths_lineage(
    tmp_path: Path, reuse: bool
) -> None:
    dslog, io = _io(tmp_path, reuse=reuse)
    obtained = []
    with dg.instance_for_test() as instance:
        for _ in range(3 if reuse else 1):  # with reuse: captured, then served from a view
            res = dg.materialize(
                [grid, lenient, strict_eager],
                instance=instance,
                resources={"dslog": dslog, "io_manager": io},
            )
            assert res.success
            np.testing.assert_array_equal(
                res.output_for_node("strict_eager"), res.output_for_node("lenient")
            )
            mats = res.asset_materializations_for_node("strict_eager")
            obtained.append(mats[0].metadata[m.OBTAINED].value)
    assert obtained[0] == "captured"
    if reuse:
        assert obtained[-1] in ("base", "dim", "gen"), obtained
    want = _lineage(dslog.store_dir, 0, "lenient")
    assert want.n == 12
    for k in range(len(obtained)):  # captured eagerly or served: the deferred capture's lineage
        assert _lineage(dslog.store_dir, k, "strict_eager") == want


def test_defer_false_reaches_an_on_demand_re_run(tmp_path: Path) -> None:
    dslog, io = _io(tmp_path, reuse=False)
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [grid, lenient, strict_later],
            instance=instance,
            resources={"dslog": dslog, "io_manager": io},
        )
    assert res.success
    log = dslog.session()
    (op,) = log.store.operations("strict_later")
    assert op.args["on_demand"]["defer"] is False
    answer, done = on_demand.trace(log, ["strict_later", "grid"], np.s_[1, 2], io.value_loader())
    assert len(done) == 1
    assert answer == log.prov_query(["lenient", "grid"], np.s_[1, 2])
    assert answer.to_indices().tolist() == [[1, 2]]


def _multi(**kwargs: Any) -> None:
    tracked_multi_asset(outs={"a": dg.AssetOut()}, **kwargs)(lambda grid: grid)


def _op(**kwargs: Any) -> None:
    tracked_op(**kwargs)(lambda grid: grid)


def _asset(**kwargs: Any) -> None:
    tracked_asset(**kwargs)(lambda grid: grid)


@pytest.mark.parametrize("decorate", [_asset, _multi, _op], ids=["asset", "multi", "op"])
def test_defer_must_be_a_bool_and_apply(decorate: Any) -> None:
    with pytest.raises(DSLogError, match=r"`defer` must be True or False, not 'no'"):
        decorate(defer="no")
    with pytest.raises(DSLogError, match=r"`defer` must be True or False, not 0"):
        decorate(defer=0)
    lineage: object = {"a": {"grid": lambda b: [b]}} if decorate is _multi else (lambda b: [b])
    with pytest.raises(DSLogError, match=r"declares its lineage .* drop `defer=False`"):
        decorate(defer=False, lineage=lineage)
