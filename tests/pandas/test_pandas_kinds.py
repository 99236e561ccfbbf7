"""DPDS operation kinds and column effects of pandas captures: one call per kind, each
expected step written by hand from the call and the frames (docs/concepts/operation-kinds.md),
stored with the operation, and the `how` query filtered by kind."""

from typing import Any

import numpy as np
import pandas as pd
import pytest

from dslog_dagster.core import provenance_queries as pq
from dslog_dagster.core.store import LineageStore
from dslog_dagster.core.store.effects import Step, step
from dslog_dagster.errors import QueryError
from dslog_dagster.pandas import capture_pandas

ZERO = {"rows_dropped": 0, "rows_generated": 0}
LIMIT = 2.0  # read by a query's `@LIMIT`


def _a() -> pd.DataFrame:
    return pd.DataFrame(
        {"k": [1, 2, 2, 3], "x": [1.0, np.nan, 3.0, 4.0], "c": ["u", "v", "u", "w"]}
    )


def _b() -> pd.DataFrame:
    return pd.DataFrame({"k": [1, 2], "y": [10.0, 20.0]})


def steps(f: Any, *frames: pd.DataFrame) -> list[Step]:
    cap = capture_pandas(f, list(frames))[0]
    pd.testing.assert_frame_equal(cap.frame, f(*frames))  # the user's values, unchanged
    assert cap.effects is not None
    return list(cap.effects.steps)


CASES = [
    ("fillna", lambda a: a.fillna({"x": 0.0}),
     [step("DataFrame.fillna", ["imputation"], transformed=["x"], **ZERO)]),
    ("replace", lambda a: a.replace("u", "U"),
     [step("DataFrame.replace", ["imputation"], transformed=["k", "x", "c"], **ZERO)]),
    ("series fillna", lambda a: a.assign(x=a["x"].fillna(0.0)),
     [step("Series.fillna", ["imputation"], transformed=["x"], **ZERO),
      step("DataFrame.assign", ["value_transformation"], transformed=["x"], **ZERO)]),
    ("ffill", lambda a: a.ffill(),
     [step("DataFrame.ffill", ["imputation"], transformed=["k", "x", "c"], **ZERO)]),
    ("cumsum", lambda a: a.assign(s=a["x"].cumsum()),
     [step("Series.cumsum", ["value_transformation"], transformed=["x"], **ZERO),
      step("DataFrame.assign", ["feature_augmentation"], added=["s"], **ZERO)]),
    ("pivot_table", lambda a: a.pivot_table(values="x", index="k", columns="c", aggfunc="sum"),
     [step("DataFrame.pivot_table", ["instance_generation", "space_transformation"],
           added=["u", "v", "w"], removed=["k", "x", "c"], rows_dropped=None,
           rows_generated=3)]),
    ("filter", lambda a: a[a["x"] > 2],
     [step("DataFrame.__getitem__", ["instance_drop"], rows_dropped=2, rows_generated=0)]),
    ("query", lambda a: a.query("x > @LIMIT"),
     [step("DataFrame.query", ["instance_drop"], rows_dropped=2, rows_generated=0)]),
    ("dropna", lambda a: a.dropna(),
     [step("DataFrame.dropna", ["instance_drop"], rows_dropped=1, rows_generated=0)]),
    ("head", lambda a: a.sort_values("x").head(2),
     [step("DataFrame.sort_values", ["space_transformation"], rows_dropped=0, rows_generated=0),
      step("DataFrame.head", ["instance_drop"], rows_dropped=2, rows_generated=0)]),
    ("select", lambda a: a[["k", "c"]],
     [step("DataFrame.__getitem__", ["feature_selection"], removed=["x"], **ZERO)]),
    ("drop", lambda a: a.drop(columns=["c"]),
     [step("DataFrame.drop", ["feature_selection"], removed=["c"], **ZERO)]),
    ("assign new", lambda a: a.assign(z=a["x"] * 2),
     [step("DataFrame.assign", ["feature_augmentation"], added=["z"], **ZERO)]),
    ("setitem", lambda a: _set(a, "x", a["x"] + 1),
     [step("DataFrame.__setitem__", ["value_transformation"], transformed=["x"], **ZERO)]),
    ("clip", lambda a: a[["x"]].clip(0, 2),
     [step("DataFrame.__getitem__", ["feature_selection"], removed=["k", "c"], **ZERO),
      step("DataFrame.clip", ["value_transformation"], transformed=["x"], **ZERO)]),
    ("rename", lambda a: a.rename(columns={"c": "cat"}),
     [step("DataFrame.rename", ["feature_rename"], renamed=[("c", "cat")], **ZERO)]),
    ("get_dummies", lambda a: pd.get_dummies(a, columns=["c"]),
     [step("pandas.get_dummies", ["space_augmentation"], added=["c_u", "c_v", "c_w"],
           removed=["c"], **ZERO)]),
    ("groupby", lambda a: a.groupby("k").agg(s=("x", "sum")),
     [step("DataFrameGroupBy.agg", ["instance_generation"], added=["s"],
           removed=["k", "x", "c"], rows_generated=3)]),
    ("concat", lambda a: pd.concat([a, a]),
     [step("pandas.concat", ["append"], **ZERO)]),
    ("melt", lambda a: a.melt(id_vars=["k"], value_vars=["x"]),
     [step("DataFrame.melt", ["space_transformation"], added=["variable", "value"],
           removed=["x", "c"], rows_dropped=0, rows_generated=0)]),
    ("stack", lambda a: a[["x"]].stack().reset_index(name="v"),
     [step("DataFrame.__getitem__", ["feature_selection"], removed=["k", "c"], **ZERO),
      step("DataFrame.stack", ["space_transformation"], added=["0"], removed=["x"],
           rows_dropped=1, rows_generated=0),
      step("DataFrame.reset_index", ["feature_augmentation"], added=["level_0", "level_1"],
           **ZERO)]),
    ("rolling", lambda a: a.assign(r=a["x"].rolling(2).sum()),
     [step("Rolling.sum", ["value_transformation"], transformed=["x"], **ZERO),
      step("DataFrame.assign", ["feature_augmentation"], added=["r"], **ZERO)]),
]  # fmt: skip


def _set(a: Any, name: str, value: Any) -> Any:
    a[name] = value
    return a


@pytest.mark.parametrize(("name", "f", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_call_records_its_kind_and_column_effect(name: str, f: Any, expected: Any) -> None:
    assert steps(f, _a()) == expected


def test_joins_record_the_other_frames_columns() -> None:
    got = steps(lambda a, b: pd.merge(a, b, on="k", how="left"), _a(), _b())
    assert got == [step("pandas.merge", ["join"], added=["y"], rows_generated=4)]
    got = steps(lambda a, b: a.merge(b, on="k"), _a(), _b())
    assert got == [step("DataFrame.merge", ["join"], added=["y"], rows_generated=3)]


def test_nothing_recorded_reads_unknown_and_a_copy_is_no_step() -> None:
    # reset_index(drop=True) takes its kind from its effect: it changed no column or row
    cap = capture_pandas(lambda a: a.copy().reset_index(drop=True), [_a()])[0]
    assert cap.effects is not None
    assert cap.effects.kinds == ("unknown",)


def test_stored_and_how_filters_by_kind(tmp_path: Any) -> None:
    """The DPDS running example's shape: a left join, an imputation, a one-hot encoding.
    Cell (row 1, `y`) — a null the join made and fillna filled — was touched by the one
    pandas step (join + imputation); copying column `y` out downstream is a feature
    selection and no imputation."""
    from dslog_dagster.core.api import DSLog

    def prep(a: Any, b: Any) -> Any:
        m = pd.merge(a, b, on="k", how="left")
        return pd.get_dummies(m.fillna({"y": 0.0}), columns=["c"])

    store = LineageStore(tmp_path / "s")
    cap = capture_pandas(prep, {"a": _a(), "b": _b()})[0]
    op = cap.register(store, "prepped")
    again = LineageStore(tmp_path / "s").get_operation(op.op_id)
    assert again.kinds == ("join", "imputation", "space_augmentation")
    assert again.effects == cap.effects

    log = DSLog(store)
    y = cap.frame[["y"]].to_numpy(dtype=float)
    rec = store.get_array("prepped")
    col = list(cap.frame.columns).index("y")
    from dslog_dagster.core.relation import LineageRelation

    n = y.shape[0]
    rel = LineageRelation.from_columns((n, 1), rec.shape, [np.arange(n), np.zeros(n, np.int64)],
                                       [np.arange(n), np.full(n, col)])  # fmt: skip
    log.register_operation(
        "copy_y", [rec], [log.array("y_copy", y.shape)], {("y_copy", "prepped"): rel}
    )
    cell = pq.item((n, 1), 1, 0)
    everything = pq.how(store, "y_copy", cell)
    assert [(s.op_name, s.kinds) for s in everything.steps] == [
        ("pandas", ("join", "imputation", "space_augmentation")),
        ("copy_y", ("feature_selection",)),  # the NumPy rule: one column of each row kept
    ]
    imputations = pq.how(store, "y_copy", cell, kind="imputation")
    assert [s.op_name for s in imputations.steps] == ["pandas"]
    assert imputations.rows()[0]["kinds"] == "join, imputation, space_augmentation"
    assert pq.how(store, "y_copy", cell, kind="feature_rename").steps == ()
    with pytest.raises(QueryError, match="Unknown operation kind"):
        pq.how(store, "y_copy", cell, kind="imputations")
