"""Column and row operations of the pandas capture against the brute-force reference."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas_reference import check, col, with_ids

from dslog_dagster.core.capture import Capture, capture
from dslog_dagster.errors import UnsupportedArrayError, UnsupportedFrameOperationError
from dslog_dagster.pandas import capture_pandas


def _df() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "a": [1.0, np.nan, 3.0, -2.0, 5.0],
            "b": ["x", "y", None, "x", "z"],
            "c": [10, 20, 30, 40, 50],
        },
        index=[7, 3, 9, 1, 4],
    )


def run(fn, *frames):
    caps = capture_pandas(fn, list(frames))
    assert len(caps) == 1
    pd.testing.assert_frame_equal(caps[0].frame, fn(*frames))
    return caps[0]


def same_rows(out_ids, df, out_cols, extra_consid=()):
    """Pairs of a frame whose row k is input row out_ids[k] and whose column j comes from
    input column out_cols[j] (None: a literal); every cell also considered the input
    columns extra_consid of its row."""
    contrib, consid = set(), set()
    for k, r in enumerate(out_ids):
        for j, src in enumerate(out_cols):
            cells = [] if src is None else [src] if not isinstance(src, list) else src
            for c in cells:
                contrib.add((k, j, r, col(df, c)))
            for c in extra_consid:
                consid.add((k, j, r, col(df, c)))
    return contrib, contrib | consid


@pytest.mark.parametrize(
    ("fn", "cols"),
    [
        (lambda d: d[["c", "a"]], ["c", "a"]),
        (lambda d: d.drop(columns="b"), ["a", "c"]),
        (lambda d: d.drop("a", axis=1), ["b", "c"]),
        (lambda d: d.rename(columns={"a": "A"}), ["a", "b", "c"]),
        (lambda d: d.astype({"c": "float64"}), ["a", "b", "c"]),
        (lambda d: d.assign(s=d["a"] + d["c"], k=1), ["a", "b", "c", ["a", "c"], None]),
        (lambda d: d.assign(a=d.c * 2), ["c", "b", "c"]),
        (lambda d: d.copy().reset_index(drop=True), ["a", "b", "c"]),
        (lambda d: d.select_dtypes("number"), ["a", "c"]),
        (lambda d: d.isna(), ["a", "b", "c"]),
    ],
)
def test_column_operations(fn, cols) -> None:
    df = _df()
    cap = run(fn, df)
    want, want_c = same_rows(range(len(df)), df, cols)
    check(cap, 0, want, considered=False)
    check(cap, 0, want_c, considered=True)


@pytest.mark.parametrize(
    ("fn", "ref", "pred"),
    [
        (lambda d: d[d["a"] > 0], lambda d: d[d["a"] > 0], ["a"]),
        (lambda d: d[(d.a > 0) & (d.c < 50)], lambda d: d[(d.a > 0) & (d.c < 50)], ["a", "c"]),
        (
            lambda d: d.query("a > 0 and c != 30"),
            lambda d: d.query("a > 0 and c != 30"),
            ["a", "c"],
        ),
        (lambda d: d.dropna(subset=["a"]), lambda d: d.dropna(subset=["a"]), ["a"]),
        (lambda d: d.dropna(), lambda d: d.dropna(), ["a", "b", "c"]),
        (lambda d: d.loc[d.c > 20, ["c", "a"]], lambda d: d.loc[d.c > 20, ["c", "a", "_r"]], ["c"]),
        (lambda d: d.iloc[[4, 0, 0, 2]], lambda d: d.iloc[[4, 0, 0, 2]], []),
        (lambda d: d.loc[[9, 7]], lambda d: d.loc[[9, 7]], []),
        (lambda d: d.iloc[1:4, [2, 0]], lambda d: d.iloc[1:4, [2, 0, 3]], []),
        (lambda d: d.tail(2), lambda d: d.tail(2), []),
        (
            lambda d: d.sort_values("c", ascending=False),
            lambda d: d.sort_values("c", ascending=False),
            [],
        ),
    ],
)
def test_row_selections(fn, ref, pred) -> None:
    df = _df()
    cap = run(fn, df)
    ids = ref(with_ids(df))
    out_cols = [c for c in ids.columns if c != "_r"]
    want, want_c = same_rows(ids["_r"].tolist(), df, out_cols, pred)
    check(cap, 0, want, considered=False)
    check(cap, 0, want_c, considered=True)


def test_fillna_value_and_dict_and_replace() -> None:
    df = _df()
    for fn in (
        lambda d: d.fillna(0),
        lambda d: d.fillna({"a": -1.0, "b": "?"}),
        lambda d: d.replace(10, 11),
        lambda d: d.assign(a=d.a.fillna(d.c)),
    ):
        cap = run(fn, df)
        out = fn(df)
        contrib, consid = set(), set()
        for k in range(len(df)):
            for j, c in enumerate(out.columns):
                old, new = df[c].iloc[k], out[c].iloc[k]
                replaced = (pd.isna(old) and not pd.isna(new)) or (
                    c == "c" and old == 10 and new == 11
                )
                if not replaced:
                    contrib.add((k, j, k, j))
                else:
                    consid.add((k, j, k, j))
                    if c == "a" and out is not None and fn is not None and new == df["c"].iloc[k]:
                        contrib.add((k, j, k, col(df, "c")))
        check(cap, 0, contrib, considered=False)
        check(cap, 0, contrib | consid, considered=True)


def test_where_mask_clip() -> None:
    df = _df()
    cond = df["c"] > 20
    cap = run(
        lambda d: d.assign(w=d.a.where(d.c > 20, d.c), m=d.c.mask(d.c > 20), k=d.c.clip(15, 45)), df
    )
    a, c = col(df, "a"), col(df, "c")
    contrib, consid = set(), set()
    for k in range(len(df)):
        for j in range(3):
            contrib.add((k, j, k, j))
        contrib.add((k, 3, k, a) if cond.iloc[k] else (k, 3, k, c))
        consid.add((k, 3, k, c))
        if not cond.iloc[k]:
            contrib.add((k, 4, k, c))
        consid.add((k, 4, k, c))
        v = df["c"].iloc[k]
        if 15 <= v <= 45:
            contrib.add((k, 5, k, c))
        consid.add((k, 5, k, c))
    check(cap, 0, contrib, considered=False)
    check(cap, 0, contrib | consid, considered=True)


def test_top_k_considers_the_keys_ranked_above() -> None:
    df = _df()
    for fn in (lambda d: d.sort_values("c", ascending=False).head(3), lambda d: d.nlargest(3, "c")):
        cap = run(fn, df)
        ids = fn(with_ids(df))["_r"].tolist()
        contrib, consid = set(), set()
        for k, r in enumerate(ids):
            for j in range(3):
                contrib.add((k, j, r, j))
                for above in ids[: k + 1]:
                    consid.add((k, j, above, col(df, "c")))
        check(cap, 0, contrib, considered=False)
        check(cap, 0, contrib | consid, considered=True)


def test_literal_after_filter_inherits_the_predicate() -> None:
    df = _df()
    cap = run(lambda d: d[d.c > 20].assign(flag=True)[["flag"]], df)
    ids = [2, 3, 4]
    check(cap, 0, set(), considered=False)
    check(cap, 0, {(k, 0, r, col(df, "c")) for k, r in enumerate(ids)}, considered=True)


def test_get_dummies_and_drop_duplicates() -> None:
    df = pd.DataFrame({"k": ["a", "b", "a", "c", "b"], "v": [1, 2, 1, 3, 5]})
    cap = run(lambda d: pd.get_dummies(d, columns=["k"]), df)
    contrib = {(k, j, k, 1 if j == 0 else 0) for k in range(5) for j in range(4)}
    check(cap, 0, contrib, considered=False)
    check(cap, 0, contrib, considered=True)
    cap = run(lambda d: d.drop_duplicates(subset=["k"]), df)
    groups = {"a": [0, 2], "b": [1, 4], "c": [3]}
    ids = [0, 1, 3]
    contrib = {(k, j, r, j) for k, r in enumerate(ids) for j in range(2)}
    consid = {(k, j, m, 0) for k, r in enumerate(ids) for j in range(2) for m in groups[df.k[r]]}
    check(cap, 0, contrib, considered=False)
    check(cap, 0, contrib | consid, considered=True)


def test_row_wise_apply_is_flagged_all_to_all_within_the_row() -> None:
    df = _df()
    cap = run(
        lambda d: d.apply(lambda row: str(row["b"]) + str(row["c"]), axis=1).to_frame("s"), df
    )
    assert cap.flagged
    assert "DataFrame.apply(axis=1)" in cap.flagged_ops
    want = {(k, 0, k, c) for k in range(5) for c in range(3)}
    check(cap, 0, want, considered=False)


@pytest.mark.parametrize(
    ("fn", "name"),
    [
        (lambda d: d.pivot_table(index="b"), "DataFrame.pivot_table"),
        (lambda d: d.a.sum(), "Series.sum"),
        (lambda d: d.to_numpy(), "DataFrame.to_numpy"),
        (lambda d: d.groupby("b").agg(lambda s: s.iloc[0]), "DataFrameGroupBy.agg"),
        (lambda d: d.apply(np.sum), "DataFrame.apply"),
        (lambda d: d.a.ewm(2), "Series.ewm"),
    ],
)
def test_unknown_operations_are_refused_by_name(fn, name) -> None:
    with pytest.raises(UnsupportedFrameOperationError, match=name.replace(".", r"\.")):
        capture_pandas(fn, [_df()])


def test_capture_api_dispatches_frames_and_refuses_frames_as_arrays() -> None:
    df = _df()
    r = Capture(mode="considered").run(lambda d: d.fillna(0), df)
    pd.testing.assert_frame_equal(r.value, df.fillna(0))
    assert r.relation(0, 0, considered=True).n >= r.relation(0, 0).n > 0
    from dslog_dagster.core.capture import as_input

    with pytest.raises(UnsupportedArrayError, match="column names and dtypes"):
        as_input(pd.DataFrame({"a": [1.0]}), 0)
    assert capture(lambda d: d[["a"]], df).value.columns.tolist() == ["a"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 1.0, 2.0, np.nan]), st.integers(-3, 3)),
        min_size=0,
        max_size=12,
    ),
    st.integers(-2, 2),
)
def test_filters_on_random_frames(rows, t) -> None:
    df = pd.DataFrame(rows, columns=["k", "v"]).astype({"k": "float64", "v": "int64"})
    fn = lambda d: d[d.v > t].fillna({"k": -1.0})  # noqa: E731
    cap = run(fn, df)
    ids = with_ids(df)[df.v > t]["_r"].tolist()
    contrib, consid = set(), set()
    for k, r in enumerate(ids):
        if not pd.isna(df.k.iloc[r]):
            contrib.add((k, 0, r, 0))
        contrib.add((k, 1, r, 1))
        for j in range(2):
            consid |= {(k, j, r, 1), (k, j, r, j)}
    check(cap, 0, contrib, considered=False)
    check(cap, 0, contrib | consid, considered=True)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 7), st.integers(-3, 3))
def test_shift_and_diff_take_the_cell_periods_rows_away(n, periods) -> None:
    df = pd.DataFrame({"v": np.arange(n, dtype="float64") ** 2})
    fn = lambda d: d.assign(s=d.v.shift(periods), d=d.v.diff(periods))  # noqa: E731
    cap = run(fn, df)
    want = set()
    for k in range(n):
        want.add((k, 0, k, 0))
        want.add((k, 2, k, 0))
        if 0 <= k - periods < n:
            want.add((k, 1, k - periods, 0))
            want.add((k, 2, k - periods, 0))
    check(cap, 0, want, considered=False)
    check(cap, 0, want, considered=True)


def test_explode_and_melt() -> None:
    df = pd.DataFrame({"id": [1, 2, 3], "xs": [[1, 2], [], [3]], "a": [0.5, 0.6, 0.7]})
    cap = run(lambda d: d.explode("xs"), df)
    ids = [0, 0, 1, 2]
    want = {(k, j, r, j) for k, r in enumerate(ids) for j in range(3)}
    check(cap, 0, want, considered=False)
    wide = pd.DataFrame({"id": [1, 2], "x": [3.0, 4.0], "y": [5.0, 6.0]})
    cap = run(lambda d: d.melt(id_vars=["id"], value_vars=["x", "y"]), wide)
    # rows: (0, x), (1, x), (0, y), (1, y); columns id, variable, value
    want = {(0, 0, 0, 0), (1, 0, 1, 0), (2, 0, 0, 0), (3, 0, 1, 0)}
    want |= {(0, 2, 0, 1), (1, 2, 1, 1), (2, 2, 0, 2), (3, 2, 1, 2)}
    check(cap, 0, want, considered=False)
    check(cap, 0, want, considered=True)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1.0, 2.0, np.nan]), min_size=0, max_size=9),
    st.integers(1, 4),
    st.sampled_from(["sum", "max", "count", "mean"]),
    st.sampled_from([None, 1]),
)
def test_rolling_windows(values, w, func, min_periods) -> None:
    df = pd.DataFrame({"v": values}, dtype="float64")
    fn = lambda d: d.assign(r=getattr(d.v.rolling(w, min_periods=min_periods), func)())  # noqa: E731
    cap = run(fn, df)
    res = fn(df)["r"].to_numpy()
    v = df.v.to_numpy()
    contrib = {(k, 0, k, 0) for k in range(len(df))}
    consid = set()
    for k in range(len(df)):
        win = [r for r in range(max(0, k - w + 1), k + 1)]
        consid |= {(k, 1, r, 0) for r in win}
        if np.isnan(res[k]) or func == "count":
            continue
        if func == "max":
            contrib |= {(k, 1, r, 0) for r in win if v[r] == res[k]}
        else:
            contrib |= {(k, 1, r, 0) for r in win if not np.isnan(v[r])}
    check(cap, 0, contrib, considered=False)
    check(cap, 0, contrib | consid, considered=True)


def test_replace_with_a_mapping_per_column() -> None:
    df = pd.DataFrame({"s": ["A11", "A12", "x", None], "t": ["A11", "y", "A11", "z"]})
    fn = lambda d: d.replace({"s": {"A11": "<0", "A12": "0-200"}})  # noqa: E731
    cap = capture_pandas(fn, [df])[0]
    pd.testing.assert_frame_equal(cap.frame, fn(df))
    # s: rows 0 and 1 became literals (the old cell decided: considered only); t is untouched
    contrib = {(2, 0, 2, 0), (3, 0, 3, 0)} | {(k, 1, k, 1) for k in range(4)}
    check(cap, 0, contrib, considered=False)
    check(cap, 0, contrib | {(0, 0, 0, 0), (1, 0, 1, 0)}, considered=True)
    with pytest.raises(UnsupportedFrameOperationError, match="replace"):
        capture_pandas(lambda d: d.replace({"s": {"A11": "<0"}, "t": "y"}), [df])


def test_stack_hand_derived() -> None:
    df = pd.DataFrame({"x": [1.0, np.nan], "y": [3.0, 4.0]}, index=["p", "q"])
    cap = run(lambda d: d[d.y > 2].stack().reset_index(name="v"), df)
    # rows: (p, x), (p, y), (q, y) — (q, x) is null and dropped; columns level_0, level_1, v
    assert cap.frame["v"].tolist() == [1.0, 3.0, 4.0]
    want = {(0, 2, 0, 0), (1, 2, 0, 1), (2, 2, 1, 1)}
    check(cap, 0, want, considered=False)
    # the filter's predicate (y) was considered by every cell of each kept row
    consid = want | {(k, j, r, 1) for k, r in ((0, 0), (1, 0), (2, 1)) for j in range(3)}
    check(cap, 0, consid, considered=True)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 1.5, np.nan]), st.sampled_from([2.0, np.nan])),
        min_size=0,
        max_size=6,
    ),
    st.sampled_from([{}, {"future_stack": True}]),
)
def test_stack_equals_cells_carried_by_hand(rows, kw) -> None:
    df = pd.DataFrame(rows, columns=["a", "b"], dtype="float64")
    cap = run(lambda d: d.stack(**kw).to_frame("v"), df)
    # the reference: stack the cells' own (row, column) ids with the same null mask
    ids = pd.DataFrame(
        [[f"{i},{j}" for j in range(2)] for i in range(len(df))], columns=df.columns, dtype=object
    )
    ref = ids.mask(df.isna()).stack(**kw) if kw == {} else ids.stack(**kw)
    want = set()
    for k, v in enumerate(ref.tolist()):
        i, j = map(int, v.split(","))
        want.add((k, 0, i, j))
    check(cap, 0, want, considered=False)
    check(cap, 0, want, considered=True)


def test_stack_refuses_what_it_cannot_line_up() -> None:
    df = pd.DataFrame({"x": [1.0], "y": [2.0]})
    with pytest.raises(UnsupportedFrameOperationError, match=r"DataFrame\.stack"):
        capture_pandas(lambda d: d.stack(level=1).to_frame(), [df])
