"""Row-order rules (cumulative aggregates, ffill/bfill, interpolate) and ``pivot_table`` of the
pandas capture against brute-force references written with plain loops, on random series with
nulls and random frames with duplicate and null keys."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas_reference import check

from dslog_dagster.errors import UnsupportedFrameOperationError
from dslog_dagster.pandas import capture_pandas
from dslog_dagster.pandas.sequence import MAX_PREFIX_ROWS

VALUES = st.lists(st.sampled_from([1.0, 2.0, 3.0, np.nan]), min_size=0, max_size=9)


def run(fn, df):
    caps = capture_pandas(fn, [df])
    pd.testing.assert_frame_equal(caps[0].frame, fn(df))
    return caps[0]


def _null(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


@settings(max_examples=40, deadline=None)
@given(VALUES, st.sampled_from(["cumsum", "cumprod", "cummax", "cummin"]))
def test_cumulative(vals, func) -> None:
    df = pd.DataFrame({"v": vals, "w": np.arange(len(vals), dtype=np.int64)}, dtype=object)
    df = df.astype({"v": "float64", "w": "int64"})
    cap = run(lambda d: d.assign(c=getattr(d["v"], func)()), df)
    res = getattr(df["v"], func)()
    contrib, consid = set(), set()
    for k in range(len(vals)):
        contrib |= {(k, 0, k, 0), (k, 1, k, 1)}
        for j in range(k + 1):
            consid.add((k, 2, j, 0))
            if _null(vals[j]) or _null(res[k]):
                continue
            if func in ("cumsum", "cumprod") or vals[j] == res[k]:
                contrib.add((k, 2, j, 0))
    check(cap, 0, contrib, considered=False)
    check(cap, 0, contrib | consid, considered=True)


@settings(max_examples=40, deadline=None)
@given(VALUES, st.sampled_from(["ffill", "bfill", "interpolate"]))
def test_fills(vals, method) -> None:
    df = pd.DataFrame({"v": pd.Series(vals, dtype="float64")})
    cap = run(lambda d: getattr(d, method)(), df)
    n = len(vals)
    contrib, consid = set(), set()
    for k in range(n):
        if not _null(vals[k]):
            contrib.add((k, 0, k, 0))
            continue
        before = [j for j in range(k) if not _null(vals[j])]
        after = [j for j in range(k + 1, n) if not _null(vals[j])]
        if method == "ffill":
            srcs = before[-1:]
        elif method == "bfill":
            srcs = after[:1]
        else:  # linear: both neighbours; trailing: the last value; leading: stays null
            srcs = (before[-1:] + after[:1]) if before else []
        if srcs:
            contrib |= {(k, 0, j, 0) for j in srcs}
            consid.add((k, 0, k, 0))
    check(cap, 0, contrib, considered=False)
    check(cap, 0, contrib | consid, considered=True)


def test_a_cumulative_aggregate_over_too_many_rows_is_refused() -> None:
    df = pd.DataFrame({"v": np.ones(MAX_PREFIX_ROWS + 1)})
    with pytest.raises(UnsupportedFrameOperationError, match="row pairs"):
        capture_pandas(lambda d: d.cumsum(), [df])


def test_interpolate_options_are_refused() -> None:
    df = pd.DataFrame({"v": [1.0, np.nan, 3.0]})
    with pytest.raises(UnsupportedFrameOperationError, match="interpolate"):
        capture_pandas(lambda d: d["v"].interpolate(method="nearest").to_frame(), [df])


ROWS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", None]),
        st.sampled_from(["x", "y", "z", None]),
        st.sampled_from([1.0, 2.0, 5.0, np.nan]),
    ),
    min_size=1,
    max_size=9,
)


@settings(max_examples=40, deadline=None)
@given(ROWS, st.sampled_from(["mean", "sum", "max", "min", "count", "first", "last"]))
def test_pivot_table(rows, func) -> None:
    df = pd.DataFrame(rows, columns=["k", "c", "v"]).astype({"v": "float64"})
    fn = lambda d: d.pivot_table(values="v", index="k", columns="c", aggfunc=func).reset_index()  # noqa: E731
    try:
        plain = fn(df)
    except (ValueError, KeyError, IndexError):  # pandas has nothing to pivot: same error
        with pytest.raises(Exception):  # noqa: B017, PT011
            capture_pandas(fn, [df])
        return
    cap = run(fn, df)
    out_rows = {k: g for g, k in enumerate(plain["k"])}
    out_cols = {c: j for j, c in enumerate(plain.columns) if j > 0}
    contrib, consid = set(), set()
    for g, key in enumerate(plain["k"]):
        group = [r for r, (k, _, _) in enumerate(rows) if k == key]
        for j in range(plain.shape[1]):  # every cell: the keys of the row group decided it
            consid |= {(g, j, r, c) for r in group for c in (0, 1)}
        contrib |= {(g, 0, r, 0) for r in group}
        for c_label, j in out_cols.items():
            members = [r for r in group if rows[r][1] == c_label]
            consid |= {(g, j, r, 2) for r in members}
            vals = [(r, rows[r][2]) for r in members if not _null(rows[r][2])]
            if func in ("mean", "sum"):
                picked = [r for r, _ in vals]
            elif func in ("max", "min"):
                want = plain.iloc[g, j]
                picked = [r for r, v in vals if v == want]
            elif func == "first":
                picked = [r for r, _ in vals][:1]
            elif func == "last":
                picked = [r for r, _ in vals][-1:]
            else:
                picked = []
            contrib |= {(g, j, r, 2) for r in picked}
    assert set(out_rows) == set(plain["k"])
    check(cap, 0, contrib, considered=False)
    check(cap, 0, contrib | consid, considered=True)


def test_pivot_table_options_are_refused() -> None:
    df = pd.DataFrame({"k": ["a"], "c": ["x"], "v": [1.0]})
    for kw in ({"margins": True}, {"fill_value": 0}, {"aggfunc": ["sum", "mean"]}):
        with pytest.raises(UnsupportedFrameOperationError, match="pivot_table"):
            capture_pandas(
                lambda d, kw=kw: d.pivot_table(values="v", index="k", columns="c", **kw), [df]
            )
