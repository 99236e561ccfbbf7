"""The NumPy rule of operation kinds (core/op_kinds.py), on captured lineage, and the
stored effects: versioned, old records read as unknown, bad kinds refused."""

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core import capture
from dslog_dagster.core.op_kinds import PAIRS_MAX, numpy_effects
from dslog_dagster.core.store import LineageStore, OperationRecord
from dslog_dagster.core.store.effects import EFFECTS_VERSION, OperationEffects, Step, step
from dslog_dagster.errors import InvalidRelationError

X = np.arange(12.0).reshape(4, 3)
Y = np.arange(6.0).reshape(2, 3)


def kinds_of(f: Any, *arrays: np.ndarray) -> OperationEffects:
    r = capture(f, *arrays)
    return numpy_effects(r.outputs[0].shape, [r.tables[0, i] for i in range(len(arrays))])


CASES = [
    # element-wise: each cell from the same cell of every input
    (lambda a: np.sqrt(a) + 1, (X,), step("numpy", ["value_transformation"],
                                          transformed=["0", "1", "2"])),
    (lambda a, b: a[:2] * b, (X, Y), step("numpy", ["unknown"], added=None, removed=None,
                                          transformed=None)),
    # rows 0, 1 fail a[:, 0] > 3: dropped
    (lambda a: a[a[:, 0] > 3], (X,), step("numpy", ["instance_drop"], rows_dropped=2,
                                          rows_generated=0)),
    (lambda a: a[:, [0, 2]], (X,), step("numpy", ["feature_selection"], removed=["1"],
                                        rows_dropped=0)),
    (lambda a, b: np.concatenate([a, b]), (X, Y), step("numpy", ["append"], rows_dropped=0,
                                                        rows_generated=0)),
    (lambda a: a.sum(axis=1), (X,), step("numpy", ["dimensionality_reduction"],
                                         removed=["0", "1", "2"], added=["0"], rows_dropped=0)),
    # neither rule fits: a column aggregate, a matrix product
    (lambda a: a.sum(axis=0), (X,), step("numpy", ["unknown"], added=None, removed=None,
                                         transformed=None)),
    (lambda a: a @ a.T, (X,), step("numpy", ["unknown"], added=None, removed=None,
                                   transformed=None)),
]  # fmt: skip


@pytest.mark.parametrize(("f", "arrays", "expected"), CASES)
def test_numpy_rule(f: Any, arrays: tuple[np.ndarray, ...], expected: Step) -> None:
    assert kinds_of(f, *arrays).steps == (expected,)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.booleans(), min_size=2, max_size=12))
def test_any_boolean_filter_is_an_instance_drop(keep: list[bool]) -> None:
    a = np.arange(len(keep) * 2, dtype=float).reshape(len(keep), 2)
    mask = np.array(keep)
    eff = kinds_of(lambda x: x[mask], a)
    if all(keep):
        assert eff.kinds == ("value_transformation",)  # every row kept: an element-wise copy
    elif not any(keep):
        assert eff.kinds == ("unknown",)  # no lineage at all: nothing to read a kind from
    else:
        assert eff.steps == (
            step("numpy", ["instance_drop"], rows_dropped=keep.count(False), rows_generated=0),
        )


def test_too_many_pairs_are_not_examined(monkeypatch: pytest.MonkeyPatch) -> None:
    import dslog_dagster.core.op_kinds as ok

    monkeypatch.setattr(ok, "PAIRS_MAX", 5)
    assert kinds_of(lambda a: a + 1, X).kinds == ("unknown",)
    assert PAIRS_MAX == 1 << 22


def test_registered_numpy_operation_stores_its_kind(tmp_path: Any) -> None:
    from dslog_dagster.core.api import DSLog, Lineage

    log = DSLog(LineageStore(tmp_path / "s"))
    r = capture(lambda a: a[a[:, 0] > 3], X)
    x = log.array("x", X.shape)
    y = log.array("y", r.outputs[0].shape)
    op = log.register_operation("filter", [x], [y], [Lineage("y", "x", r.relations[0, 0])])
    back = LineageStore(tmp_path / "s").get_operation(op.op_id)
    assert back.kinds == ("instance_drop",)
    assert back.effects is not None
    assert back.effects.steps[0].rows_dropped == 2


def _record() -> OperationRecord:
    from datetime import UTC, datetime

    return OperationRecord("o1", "op", (), (), {}, "user", {}, datetime.now(UTC), ())


def test_records_without_effects_read_unknown_and_newer_versions_too() -> None:
    d = _record().to_json()
    assert "effects" not in d  # records without effects are byte-for-byte as before
    assert OperationRecord.from_json(d).kinds == ("unknown",)
    eff = OperationEffects((step("numpy", ["imputation"], transformed=["a"]),))
    d = json.loads(json.dumps({**d, "effects": eff.to_json()}))
    assert OperationRecord.from_json(d).effects == eff
    d["effects"]["version"] = EFFECTS_VERSION + 1  # a format this reader does not know
    assert OperationRecord.from_json(d).kinds == ("unknown",)


def test_bad_kinds_are_refused() -> None:
    with pytest.raises(InvalidRelationError, match="operation kinds"):
        step("x", ["imputations"])
    with pytest.raises(InvalidRelationError, match="operation kinds"):
        step("x", [])


def test_summary() -> None:
    eff = OperationEffects(
        (
            step("a", ["join"], added=["y"], rows_generated=4),
            step("b", ["feature_rename"], renamed=[("c", "cat")]),
            step("c", ["instance_drop"], rows_dropped=2),
        )
    )
    assert eff.summary() == "join, feature_rename, instance_drop; +y c->cat; rows -2 +4"
    assert OperationEffects(()).summary() == "unknown"
