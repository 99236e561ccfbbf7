"""Declared lineage for a step (issue 28): ``@tracked_asset(lineage=...)`` for code the
annotator cannot run, stored and queried like captured lineage.

The opaque steps here leave NumPy on purpose (``tolist()`` and Python loops, integer outputs),
so capture could not run them; their declared lineage is checked against a hand-derived
answer, end to end through a captured downstream step, and every misuse is refused with a
message that says what to do.
"""

from collections import Counter
from typing import Any

import dagster as dg
import numpy as np
import pytest

from dslog_dagster import DSLogIOManager, tracked_asset, tracked_multi_asset, tracked_op
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import DSLogError, InvalidRelationError
from dslog_dagster.io_managers import metadata as m

CALLS: Counter[str] = Counter()


def moving_sums(values: list[float], width: int) -> list[float]:
    """Stands for compiled code: plain Python over lists, invisible to the annotator."""
    return [sum(values[i : i + width]) for i in range(len(values) - width + 1)]


@tracked_asset
def series() -> np.ndarray:
    return np.arange(10.0) ** 2


@tracked_asset(lineage=lambda b: [(b[0] + k,) for k in range(3)])
def window_sums(series: np.ndarray) -> np.ndarray:
    CALLS["window_sums"] += 1
    return np.asarray(moving_sums(series.tolist(), 3))


@tracked_asset(code_version="1")
def doubled(window_sums: np.ndarray) -> np.ndarray:  # captured as usual
    return window_sums * 2.0


@tracked_asset
def labels() -> np.ndarray:
    return np.array([3, 1, 2, 0])


@tracked_asset(
    lineage={"series": [(np.s_[i], np.s_[i]) for i in range(4)], "labels": None},
)
def picked(series: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """An integer output (capture gives float64 only); labels decide nothing cell-wise here."""
    return (series[:4] + labels).astype(np.int64)


def _meta(res: dg.ExecuteInProcessResult, node: str) -> dict[str, Any]:
    return {k: v.value for k, v in res.asset_materializations_for_node(node)[0].metadata.items()}


def test_declared_per_cell_lineage_is_stored_and_queried_end_to_end(
    io: DSLogIOManager, store_dir: str, instance: dg.DagsterInstance
) -> None:
    CALLS.clear()
    res = dg.materialize(
        [series, window_sums, doubled], resources={"io_manager": io}, instance=instance
    )
    assert res.success
    assert CALLS["window_sums"] == 1  # ran once, unannotated
    assert np.array_equal(
        res.output_for_node("window_sums"),
        np.asarray(moving_sums((np.arange(10.0) ** 2).tolist(), 3)),
    )
    meta = _meta(res, "window_sums")
    assert meta[m.OBTAINED] == "declared"
    log = DSLog(store_dir)
    # doubled[4] <- window_sums[4] <- series[4:7], hand-derived
    got = log.prov_query(["doubled", "window_sums", "series"], np.s_[4])
    assert got.to_flat().tolist() == [4, 5, 6]
    fwd = log.prov_query(["series", "window_sums"], np.s_[0])
    assert fwd.to_flat().tolist() == [0]
    methods = log.store.sql("SELECT op_name, capture_method FROM operations").to_pylist()
    assert {"op_name": "window_sums", "capture_method": "declared"} in methods


def test_declared_boxes_per_input_with_an_integer_output(
    io: DSLogIOManager, store_dir: str, instance: dg.DagsterInstance
) -> None:
    res = dg.materialize([series, labels, picked], resources={"io_manager": io}, instance=instance)
    assert res.success
    assert res.output_for_node("picked").dtype == np.int64
    log = DSLog(store_dir)
    assert log.prov_query(["picked", "series"], np.s_[2]).to_flat().tolist() == [2]
    assert log.prov_query(["picked", "labels"], np.s_[:]).is_empty()


def test_a_declaration_that_does_not_fit_fails_the_step_and_stores_nothing(
    io: DSLogIOManager, store_dir: str, instance: dg.DagsterInstance
) -> None:
    @tracked_asset(name="window_sums", lineage=lambda b: [(b[0] + 5,)])
    def too_far(series: np.ndarray) -> np.ndarray:
        return np.asarray(moving_sums(series.tolist(), 3))

    dg.materialize([series], resources={"io_manager": io}, instance=instance)
    with pytest.raises(InvalidRelationError, match="does not fit output shape"):
        dg.materialize([series, too_far], resources={"io_manager": io}, instance=instance,
                       selection=[too_far])  # fmt: skip
    assert not any(r.name == "window_sums" for r in DSLog(store_dir).store.arrays())


def test_multi_output_and_op_declarations(
    io: DSLogIOManager, store_dir: str, instance: dg.DagsterInstance
) -> None:
    @tracked_multi_asset(
        outs={"heads": dg.AssetOut(), "tails": dg.AssetOut()},
        lineage={"heads": lambda b: [(b[0],)], "tails": {"series": lambda b: [(b[0] + 5,)]}},
    )
    def halves(series: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = series.tolist()
        return np.asarray(values[:5]), np.asarray(values[5:])

    res = dg.materialize([series, halves], resources={"io_manager": io}, instance=instance)
    assert res.success
    log = DSLog(store_dir)
    assert log.prov_query(["tails", "series"], np.s_[1]).to_flat().tolist() == [6]
    assert log.prov_query(["heads", "series"], np.s_[1]).to_flat().tolist() == [1]

    @tracked_op(lineage=lambda b: [(9 - b[0],)])
    def reverse(x: np.ndarray) -> np.ndarray:
        return np.asarray(list(reversed(x.tolist())))

    @tracked_op
    def make() -> np.ndarray:
        return np.arange(10.0)

    @dg.job(resource_defs={"io_manager": io})
    def job() -> None:
        reverse(make())

    assert job.execute_in_process(instance=instance).success
    assert log.prov_query(["reverse:result", "make:result"], np.s_[2]).to_flat().tolist() == [7]


def test_misdeclarations_are_refused_when_the_decorator_runs() -> None:
    with pytest.raises(DSLogError, match="not a parameter"):

        @tracked_asset(lineage={"serie": lambda b: [b]})
        def a(series: np.ndarray) -> np.ndarray:
            return series

    with pytest.raises(DSLogError, match="not a per-cell callable"):

        @tracked_asset(lineage=5)
        def b(series: np.ndarray) -> np.ndarray:
            return series

    with pytest.raises(DSLogError, match='policy="capture"` does not apply'):

        @tracked_asset(lineage=lambda c: [c], policy="capture")
        def c(series: np.ndarray) -> np.ndarray:
            return series

    with pytest.raises(DSLogError, match="map each output name"):

        @tracked_multi_asset(outs={"p": dg.AssetOut()}, lineage=lambda c: [c])
        def d(series: np.ndarray) -> np.ndarray:
            return series


def test_every_tracked_input_must_be_declared(
    io: DSLogIOManager, instance: dg.DagsterInstance
) -> None:
    @tracked_asset(name="picked", lineage={"series": lambda b: [b]})
    def half_declared(series: np.ndarray, labels: np.ndarray) -> np.ndarray:
        return series[:4] + labels

    with pytest.raises(DSLogError, match="declares no lineage from input `labels`"):
        dg.materialize([series, labels, half_declared], resources={"io_manager": io},
                       instance=instance)  # fmt: skip

    @tracked_asset(name="picked", lineage=lambda b: [b])
    def ambiguous(series: np.ndarray, labels: np.ndarray) -> np.ndarray:
        return series[:4] + labels

    with pytest.raises(DSLogError, match="must say which input"):
        dg.materialize([series, labels, ambiguous], resources={"io_manager": io},
                       instance=instance)  # fmt: skip
