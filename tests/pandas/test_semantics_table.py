"""The semantics table (docs/concepts/semantics.md), rule by rule, on pandas and NumPy.

The same data and the same hand-derived answers as ``tests/spark/test_semantics_table.py``
(the Spark side), both relations. pandas has no semi or anti join and no ranking window
(those rows are Spark's only); NumPy has element-wise operations and picks.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from semantics_data import DIMS, FACTS

from dslog_dagster.core.capture import Capture
from dslog_dagster.pandas import capture_pandas

F_ = pd.DataFrame(FACTS, columns=["id", "k", "v", "p"])
D_ = pd.DataFrame(DIMS, columns=["j", "k", "w"])

Named = set[tuple[int, str, int, str]]
Rule = Callable[[dict[str, Any], str], list[tuple[int, str]]]


def _named(cap: Any, name: str, df: pd.DataFrame, considered: bool) -> Named:
    out = list(cap.frame.columns)
    rel = cap.relation(name, considered=considered)
    return {(o, out[j], r, str(df.columns[c])) for o, j, r, c in rel.unique().pairs().tolist()}


def _want(cap: Any, rule: Rule) -> Named:
    want: Named = set()
    for o, row in enumerate(cap.frame.to_dict("records")):
        for c in cap.frame.columns:
            want |= {(o, str(c), r, x) for r, x in rule(row, str(c))}
    return want


def _check(cap: Any, name: str, df: pd.DataFrame, rule: Rule, considered: bool) -> None:
    got, want = _named(cap, name, df, considered), _want(cap, rule)
    assert got == want, (
        f"{name} (considered={considered}): extra {sorted(got - want)[:10]}, "
        f"missing {sorted(want - got)[:10]}"
    )


def _group(k: int, keep: Callable[[Any], bool] = lambda r: True) -> list[int]:
    return [r[0] for r in FACTS if r[1] == k and keep(r)]


def _cells(rows: list[int], *cols: str) -> list[tuple[int, str]]:
    return [(i, c) for i in rows for c in cols]


def _rid(v: Any) -> list[int]:
    return [] if pd.isna(v) else [int(v)]


def test_aggregates_picks_counts_and_literals() -> None:
    def fn(f: Any) -> Any:
        g = f[f.id < 5].groupby("k", as_index=False)
        out = g.agg(
            s=("v", "sum"), mx=("v", "max"), mn=("v", "min"), nv=("v", "count"), si=("id", "sum")
        )
        # picks inside expressions (Spark's max(v) + 1, max(v) - min(v), max(v) + sum(id))
        out = out.assign(mx1=out.mx + 1, spread=out.mx - out.mn, mxs=out.mx + out.si)
        return out.drop(columns="si").assign(one=1)

    cap = capture_pandas(fn, {"f": F_})[0]
    kept = [r for r in FACTS if r[0] < 5]

    def members(row: dict[str, Any]) -> list[int]:
        return _group(row["k"], lambda r: r[0] < 5)

    def picked(row: dict[str, Any], best: Any) -> list[int]:
        vals = [r[2] for r in kept if r[1] == row["k"]]
        return [r[0] for r in kept if r[1] == row["k"] and r[2] == best(vals)]

    contrib: dict[str, Callable[[dict[str, Any]], list[tuple[int, str]]]] = {
        "k": lambda r: _cells(members(r), "k"),
        "s": lambda r: _cells(members(r), "v"),
        "mx": lambda r: _cells(picked(r, max), "v"),
        "mn": lambda r: _cells(picked(r, min), "v"),
        "nv": lambda r: [],
        "mx1": lambda r: _cells(picked(r, max), "v"),
        "spread": lambda r: sorted({*_cells(picked(r, max), "v"), *_cells(picked(r, min), "v")}),
        "mxs": lambda r: sorted({*_cells(picked(r, max), "v"), *_cells(members(r), "id")}),
        "one": lambda r: [],
    }
    _check(cap, "f", F_, lambda r, c: contrib[c](r), False)
    consid = {c: ("k", "id") if c in ("k", "one") else ("k", "id", "v") for c in contrib}
    _check(cap, "f", F_, lambda r, c: _cells(members(r), *consid[c]), True)


def test_offsets_joins_and_literals() -> None:
    # shift (pandas' lag: no partition or order cells, the order is the index's)
    cap = capture_pandas(lambda f: f[["id", "v"]].assign(prev=f["v"].shift(1)), {"f": F_})[0]
    lag: Rule = lambda r, c: (  # noqa: E731
        _cells([r["id"] - 1] if r["id"] else [], "v") if c == "prev" else [(r["id"], c)]
    )
    _check(cap, "f", F_, lag, False)
    _check(cap, "f", F_, lag, True)

    # an outer join on a key: the key from both matched key cells; a literal after a filter
    # and the join considers what decided the row
    def join(f: Any, d: Any) -> Any:
        a = f[f.v > 2][["id", "k"]]
        return a.merge(d, on="k", how="outer").assign(flag=True)

    cap = capture_pandas(join, {"f": F_, "d": D_})[0]
    f_own = {"id": "id", "k": "k"}
    d_own = {"j": "j", "k": "k", "w": "w"}
    _check(cap, "f", F_, lambda r, c: _cells(_rid(r["id"]), f_own[c]) if c in f_own else [], False)
    _check(cap, "d", D_, lambda r, c: _cells(_rid(r["j"]), d_own[c]) if c in d_own else [], False)
    _check(
        cap,
        "f",
        F_,
        lambda r, c: sorted(
            {*_cells(_rid(r["id"]), "k", "v"), *_cells(_rid(r["id"]), f_own.get(c, "k"))}
        ),
        True,
    )
    _check(
        cap,
        "d",
        D_,
        lambda r, c: sorted({*_cells(_rid(r["j"]), "k"), *_cells(_rid(r["j"]), d_own.get(c, "k"))}),
        True,
    )


def test_top_k_and_pivot() -> None:
    def top(f: Any) -> Any:
        return f.sort_values(["v", "id"], ascending=[False, True]).head(3)[["id", "v"]]

    cap = capture_pandas(top, {"f": F_})[0]
    ranked = [r[0] for r in sorted(FACTS, key=lambda r: (-r[2], r[0]))][:3]
    assert cap.frame["id"].tolist() == ranked
    _check(cap, "f", F_, lambda r, c: [(r["id"], c)], False)

    def above(row: dict[str, Any]) -> list[int]:
        return ranked[: ranked.index(row["id"]) + 1]

    _check(cap, "f", F_, lambda r, c: sorted({(r["id"], c), *_cells(above(r), "v", "id")}), True)

    def rows_of(row: dict[str, Any], c: str) -> list[int]:
        return _group(row["k"], lambda x: x[3] == c)

    def top_of(row: dict[str, Any], c: str) -> list[int]:
        vals = {r[0]: r[2] for r in FACTS if r[0] in rows_of(row, c)}
        return [i for i, x in vals.items() if x == max(vals.values())] if vals else []

    for func, pick in (("sum", rows_of), ("max", top_of)):

        def pivot(f: Any, func: str = func) -> Any:
            return f.pivot_table(values="v", index="k", columns="p", aggfunc=func).reset_index()

        cap = capture_pandas(pivot, {"f": F_})[0]
        contrib: dict[str, Callable[[dict[str, Any]], list[tuple[int, str]]]] = {
            "k": lambda r: _cells(_group(r["k"]), "k"),
            **{c: (lambda r, c=c, pick=pick: _cells(pick(r, c), "v")) for c in ("a", "b")},
        }
        _check(cap, "f", F_, lambda r, c, contrib=contrib: contrib[c](r), False)
        # a max compared every value of the cell's rows
        _check(
            cap,
            "f",
            F_,
            lambda r, c, contrib=contrib: sorted(
                {
                    *contrib[c](r),
                    *([] if c == "k" else _cells(rows_of(r, c), "v")),
                    *_cells(_group(r["k"]), "k", "p"),
                }
            ),
            True,
        )


def test_numpy_element_wise_and_picks() -> None:
    x = np.array([[3.0, 1.0], [5.0, 2.0], [1.0, 7.0]])
    r = Capture(mode="considered").run(lambda a: np.sqrt(a) + a[:, ::-1], x)
    want = {(i, j, i, jj) for i in range(3) for j in range(2) for jj in range(2)}
    for considered in (False, True):
        got = {tuple(p) for p in r.relation(0, considered=considered).pairs().tolist()}
        assert got == want
    # max over a column: the picked cell contributes, the compared column is considered
    r = Capture(mode="considered").run(lambda a: a.max(axis=0), x)
    assert {tuple(p) for p in r.relation(0).pairs().tolist()} == {(0, 1, 0), (1, 2, 1)}
    got = {tuple(p) for p in r.relation(0, considered=True).pairs().tolist()}
    assert got == {(j, i, j) for i in range(3) for j in range(2)}
    # ties: every tied cell contributes (-0.0 == 0.0); considered is still the whole column
    t = np.array([[5.0, 0.0], [3.0, -0.0], [5.0, -1.0]])
    r = Capture(mode="considered").run(lambda a: a.max(axis=0), t)
    got = {tuple(p) for p in r.relation(0).pairs().tolist()}
    assert got == {(0, 0, 0), (0, 2, 0), (1, 0, 1), (1, 1, 1)}
    got = {tuple(p) for p in r.relation(0, considered=True).pairs().tolist()}
    assert got == {(j, i, j) for i in range(3) for j in range(2)}
