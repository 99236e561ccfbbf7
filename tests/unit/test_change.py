"""explain_change: changed cells, traced back through each version's lineage, compared, and
where the change starts — against hand-derived answers and a brute-force reference."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.change import changed_cells, explain_change
from dslog_dagster.core.store import ArrayRecord
from dslog_dagster.errors import LineageNotFoundError, QueryError


class Pipeline:
    """x (n) → y = x · factor (element-wise) → z = y[1:] + y[:-1] (pairs), per version."""

    def __init__(self, root: Path) -> None:
        self.log = DSLog(root)
        self.values: dict[tuple[str, str | None], Any] = {}

    def run(self, v: str, x: np.ndarray, factor: float = 1.0) -> None:
        n = len(x)
        xs, ys, zs = (
            Array("x", (n,), version=v),
            Array("y", (n,), version=v),
            Array("z", (n - 1,), version=v),
        )
        y = x * factor
        z = y[1:] + y[:-1]
        self.values.update({("x", v): x, ("y", v): y, ("z", v): z})
        self.log.register_operation("scale", [xs], [ys], [Lineage(ys, xs, lambda b: [b])])
        self.log.register_operation(
            "pairsum", [ys], [zs], [Lineage(zs, ys, lambda b: [(b[0],), (b[0] + 1,)])]
        )

    def load(self, rec: ArrayRecord) -> Any:
        return self.values.get((rec.name, rec.version))


def test_a_changed_source_cell(tmp_path: Path) -> None:
    p = Pipeline(tmp_path / "s")
    x = np.arange(6.0)
    p.run("a", x)
    x2 = x.copy()
    x2[3] = 10.0
    p.run("b", x2)
    e = explain_change(p.log.store, "z", "a", "b", p.load)
    by = {a.name: a for a in e.arrays}
    assert [a.name for a in e.arrays] == ["z", "y", "x"]
    assert by["z"].changed is not None
    assert by["z"].changed.to_flat().tolist() == [2, 3]
    assert by["y"].traced.to_flat().tolist() == [2, 3, 4]
    assert by["x"].changed is not None
    assert by["x"].changed.to_flat().tolist() == [3]
    assert [o.name for o in e.origins] == ["x"]
    assert "change starts at x: a source" in e.summary()
    assert by["z"].percent_changed == pytest.approx(40.0)


def test_a_step_computing_differently(tmp_path: Path) -> None:
    p = Pipeline(tmp_path / "s")
    x = np.arange(6.0)
    p.run("a", x)
    p.run("b", x, factor=2.0)
    e = explain_change(p.log.store, "z", "a", "b", p.load)
    assert [o.name for o in e.origins] == ["y"]
    assert "step `scale` computed differently" in e.summary()


def test_unstored_values_are_unknown_not_equal(tmp_path: Path) -> None:
    p = Pipeline(tmp_path / "s")
    p.run("a", np.arange(6.0))
    p.run("b", np.arange(6.0) + 1)

    def load(rec: ArrayRecord) -> Any:
        return None if rec.name == "y" else p.load(rec)

    e = explain_change(p.log.store, "z", "a", "b", load)
    by = {a.name: a for a in e.arrays}
    assert by["y"].changed is None
    assert "cannot compare" in e.summary()
    # x differs, but y could not be compared: y is not claimed as the start, x is
    assert [o.name for o in e.origins] == ["x"]
    with pytest.raises(LineageNotFoundError, match="No stored value of `z`"):
        explain_change(p.log.store, "z", "a", "b", lambda r: None)


def test_a_shape_change_traces_every_cell(tmp_path: Path) -> None:
    p = Pipeline(tmp_path / "s")
    p.run("a", np.arange(6.0))
    p.run("b", np.arange(8.0))
    e = explain_change(p.log.store, "z", "a", "b", p.load)
    assert e.target.shape_changed
    assert e.target.changed is not None
    assert e.target.changed.count() == 7
    assert any("changed shape" in n for n in e.notes)


def test_changed_cells_treats_nan_as_equal() -> None:
    a = np.array([[1.0, np.nan], [3.0, 4.0]])
    b = np.array([[1.0, np.nan], [3.5, 4.0]])
    assert changed_cells(a, b).to_indices().tolist() == [[1, 0]]
    with pytest.raises(QueryError):
        changed_cells(a, b[:1])


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(2, 12),
    flips=st.sets(st.integers(0, 11), max_size=4),
)
def test_matches_a_brute_force_reference(
    tmp_path_factory: pytest.TempPathFactory, n: int, flips: set[int]
) -> None:
    p = Pipeline(tmp_path_factory.mktemp("s"))
    x = np.arange(float(n))
    p.run("a", x)
    x2 = x.copy()
    for i in flips:
        if i < n:
            x2[i] += 100.0
    p.run("b", x2)
    e = explain_change(p.log.store, "z", "a", "b", p.load)
    by = {a.name: a for a in e.arrays}
    z_changed = {j for j in range(n - 1) if (x2[j] + x2[j + 1]) != (x[j] + x[j + 1])}
    assert by["z"].changed is not None
    assert set(by["z"].changed.to_flat().tolist()) == z_changed
    traced = {i for j in z_changed for i in (j, j + 1)}
    if "x" in by:
        assert set(by["x"].traced.to_flat().tolist()) == traced
        assert by["x"].changed is not None
        assert set(by["x"].changed.to_flat().tolist()) == {i for i in traced if x2[i] != x[i]}
    assert bool(e.origins) == bool(z_changed)
