"""On-demand lineage in the core: reconstructing deferred operations of random NumPy pipelines
gives exactly the lineage a capture at run time gives."""

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core import Capture
from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.on_demand import (
    DEFERRED,
    deferred_args,
    reconstruct,
    register_step_function,
    trace,
)
from dslog_dagster.core.store import ArrayRecord
from dslog_dagster.errors import DeferredLineageError


def flip(x: np.ndarray) -> np.ndarray:
    return np.flipud(x)


def cumsum(x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=1)


def double(x: np.ndarray) -> np.ndarray:
    return x * 2.0


def roll(x: np.ndarray) -> np.ndarray:
    return np.roll(x, 1, axis=0)


def clip_max(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x[::-1])


STEPS: list[Callable[[np.ndarray], np.ndarray]] = [flip, cumsum, double, roll, clip_max]
_RUN = itertools.count()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[DSLog, DSLog]:
    return DSLog(tmp_path_factory.mktemp("deferred")), DSLog(tmp_path_factory.mktemp("captured"))


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=3),
    deferred=st.lists(st.booleans(), min_size=3, max_size=3),
    shape=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    seed=st.integers(0, 2**16),
    row=st.integers(0, 3),
)
def test_reconstructed_lineage_equals_captured(
    logs: tuple[DSLog, DSLog],
    steps: list[Callable[[np.ndarray], np.ndarray]],
    deferred: list[bool],
    shape: tuple[int, int],
    seed: int,
    row: int,
) -> None:
    lazy, eager = logs
    tag = f"r{next(_RUN)}"
    values: dict[tuple[str, str | None], Any] = {}
    x = np.random.default_rng(seed).random(shape)
    names = [f"a0{tag}"] + [f"a{k + 1}{tag}" for k in range(len(steps))]
    values[names[0], tag] = x
    for k, fn in enumerate(steps):
        y = fn(x)
        values[names[k + 1], tag] = y
        src, dst = Array(names[k], x.shape, version=tag), Array(names[k + 1], y.shape, version=tag)
        table = Capture().run(fn, x).tables[0, 0]
        eager.register_operation(fn.__name__, [src], [dst], [Lineage(dst, src, table)])
        if deferred[k]:
            register_step_function(fn)
            lazy.store.register_operation(
                fn.__name__,
                [lazy.array(src)],
                [lazy.array(dst)],
                {},
                args={"on_demand": deferred_args(fn, {names[k]: "x"}, "contributing")},
                capture_method=DEFERRED,
            )
        else:
            lazy.register_operation(fn.__name__, [src], [dst], [Lineage(dst, src, table)])
        x = y

    def load(rec: ArrayRecord) -> Any:
        return values.get((rec.name, rec.version))

    path = list(reversed(names))
    cells = np.s_[min(row, x.shape[0] - 1)]
    if any(deferred[: len(steps)]):
        with pytest.raises(DeferredLineageError):
            lazy.prov_query(path, cells)
    got, done = trace(lazy, path, cells, load)
    assert len(done) == sum(deferred[: len(steps)])
    assert got == eager.prov_query(path, cells)
    # reconstructing again is refused: the operation's lineage is there now, not deferred
    for r in done:
        assert r.operation.capture_method == "on-demand-reconstructed"
        assert r.operation.args["reconstructs"] == r.deferred.op_id
    if done:
        with pytest.raises(Exception, match="not on demand"):
            reconstruct(lazy.store, done[0].operation, load)
