"""``to_numpy()`` into the NumPy annotator and back as a column, inside a pandas capture.

The reference composes two independent answers: the NumPy capture of the same function on
the plain array (``dslog_dagster.core.capture``), and the rows and columns the array was
taken from, carried by hand.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas_reference import check

from dslog_dagster.core.capture import Capture
from dslog_dagster.core.native import annotator
from dslog_dagster.errors import CaptureError, UnsupportedArrayError, UnsupportedFrameOperationError
from dslog_dagster.pandas import capture_pandas

COLS = ["a", "b", "c"]


def test_round_trip_hand_derived() -> None:
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [5.0, 1.0, 7.0], "k": ["x", "y", "z"]})

    def fn(d: Any) -> Any:
        d = d[d.k != "y"]  # rows 0 and 2; the predicate k is considered by every kept cell
        x = d[["a", "b"]].to_numpy()
        return d.assign(m=np.maximum(x[:, 0], x[:, 1]), z=d.a.to_numpy() - d.a.to_numpy().mean())

    cap = capture_pandas(fn, [df])[0]
    pd.testing.assert_frame_equal(cap.frame, fn(df))  # values equal plain pandas + NumPy
    same = {(k, j, r, j) for k, r in ((0, 0), (1, 2)) for j in range(3)}
    # m: the picked b cell (5 > 1, 7 > 3); z: every kept a cell (the mean)
    picked = {(0, 3, 0, 1), (1, 3, 2, 1)}
    mean = {(k, 4, r, 0) for k in (0, 1) for r in (0, 2)}
    check(cap, 0, same | picked | mean, considered=False)
    compared = {(0, 3, 0, 0), (1, 3, 2, 0)}  # max compared the a cell too
    predicate = {(k, j, r, 2) for k, r in ((0, 0), (1, 2)) for j in range(5)}
    predicate |= {(k, 4, r, 2) for k in (0, 1) for r in (0, 2)}  # the mean's rows' predicates
    check(cap, 0, same | picked | mean | compared | predicate, considered=True)


FUNCS: dict[str, Callable[[Any], Any]] = {
    "row sum": lambda x: x.sum(axis=1),
    "product": lambda x: x[:, 0] * x[:, 2],
    "row max": lambda x: np.max(x, axis=1),
    "projection": lambda x: x @ np.array([0.5, -1.0, 2.0]),
    "centred": lambda x: x[:, 1] - x[:, 1].mean(),
    "sorted": lambda x: np.sort(x[:, 0]),
    "where": lambda x: np.where(x[:, 0] > x[:, 1], x[:, 2], 0.0),
}


def _reference(
    df: pd.DataFrame, t: float, f: Callable[[Any], Any], considered: bool
) -> set[tuple[int, int, int, int]]:
    kept = np.flatnonzero(df["c"].to_numpy() > t)  # the filter, rows carried by hand
    x = df[COLS].to_numpy()[kept]
    mode = "considered" if considered else "contributing"
    res = Capture(mode=mode).run(f, x)
    rel = (res.considered if considered else res.relations)[(0, 0)]
    out_col = len(COLS)  # the assigned column
    want = set()
    for k, r in enumerate(kept.tolist()):
        for j in range(len(COLS)):
            want.add((k, j, r, j))
            if considered:
                want.add((k, j, r, 2))  # the predicate on c
        if considered:
            want.add((k, out_col, r, 2))
    for o, i, j in np.column_stack([rel.out_cols[0], *rel.in_cols]).tolist():
        want.add((o, out_col, int(kept[i]), j))
        if considered:
            want.add((o, out_col, int(kept[i]), 2))  # the bridged row's predicate
    return want


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(*[st.sampled_from([-1.0, 0.0, 2.5, np.nan]) for _ in COLS]),
        min_size=1,
        max_size=7,
    ),
    st.sampled_from(sorted(FUNCS)),
    st.sampled_from([-2.0, 0.0]),
)
def test_round_trip_equals_numpy_capture_composed_by_hand(
    rows: list[tuple[float, ...]], name: str, t: float
) -> None:
    df = pd.DataFrame(rows, columns=COLS, dtype="float64")
    f = FUNCS[name]

    def fn(d: Any) -> Any:
        d = d[d.c > t]
        return d.assign(y=f(d[COLS].to_numpy()))

    if not (df["c"] > t).any():
        return  # nothing kept: NumPy's own reductions warn on empty arrays
    plain = fn(df)
    cap = capture_pandas(fn, [df])[0]
    pd.testing.assert_frame_equal(cap.frame, plain)
    for considered in (False, True):
        check(cap, 0, _reference(df, t, f, considered), considered=considered)


def test_refusals_say_what_to_do() -> None:
    df = pd.DataFrame({"a": [1.0, 2.0], "n": [1, 2]})
    with pytest.raises(UnsupportedFrameOperationError, match=r"astype\('float64'\)"):
        capture_pandas(lambda d: d.assign(y=d[["n"]].to_numpy()[:, 0]), [df])
    with pytest.raises(UnsupportedArrayError, match=r"assign\(name=array\)"):
        capture_pandas(lambda d: d[["a"]].to_numpy(), [df])
    with pytest.raises(UnsupportedFrameOperationError, match="put it back as a column"):
        capture_pandas(lambda d: d.assign(y=d.a + d.a.to_numpy()), [df])
    with pytest.raises(CaptureError, match="one column of the frame's length"):
        capture_pandas(lambda d: d.assign(y=d[["a"]].to_numpy()), [df])
    # every failed capture ended its annotation run: the thread can capture again
    assert not annotator.active()
    cap = capture_pandas(lambda d: d.assign(y=d.a.to_numpy() * 2), [df])[0]
    assert cap.frame["y"].tolist() == [2.0, 4.0]
