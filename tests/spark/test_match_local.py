"""Matching a selective re-run's rows to the selected stored rows in this process
(:func:`dslog_dagster.spark.on_demand.match_local`), against a brute-force reference with
Spark's equality written pairwise (NaN equals NaN, ``-0.0`` equals ``0.0``, null equals null,
structs field by field). No Spark session: the rows are Python tuples as ``collect`` gives."""

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.spark.on_demand import match_local


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _reference(rec: list[tuple[Any, ...]], sto: list[tuple[Any, ...]]) -> list[tuple[int, int]]:
    out = []
    for s in sorted(sto, key=lambda r: r[-1]):
        rank = sum(1 for t in sto if t[-1] < s[-1] and _equal(t[:-1], s[:-1]))
        equal = sorted(r[-1] for r in rec if _equal(r[:-1], s[:-1]))
        out.append((equal[rank] if rank < len(equal) else -1, s[-1]))
    return out


# a fresh NaN object each time, as collect gives (one shared NaN object would match itself
# by identity in a dict and hide a missing NaN rule)
_values = st.one_of(st.sampled_from([0.0, -0.0, 1.5, None]), st.builds(float, st.just("nan")))
_rows = st.lists(st.tuples(_values, st.sampled_from(["a", "b", None]), _values), max_size=12)


@settings(max_examples=200, deadline=None)
@given(_rows, _rows, st.randoms(use_true_random=False))
def test_match_local_equals_the_pairwise_reference(
    rec_vals: list[tuple[Any, ...]], sto_vals: list[tuple[Any, ...]], rnd: Any
) -> None:
    # ids in a shuffled order: pairs follow row ids, not list order
    rec_ids = rnd.sample(range(100), len(rec_vals))
    rec = [(*v, i) for v, i in zip(rec_vals, rec_ids, strict=True)]
    sto = [(*v, 200 + k) for k, v in enumerate(sto_vals)]
    rnd.shuffle(sto)
    got = match_local(rec, sto)
    assert got.shape == (len(sto), 2)
    assert [tuple(p) for p in got.tolist()] == _reference(rec, sto)


def test_structs_arrays_and_binary_compare_by_value() -> None:
    rec = [((1, float("nan")), [1.0, -0.0], bytearray(b"x"), 7)]
    sto = [
        ((1, float("nan")), [1.0, 0.0], bytearray(b"x"), 3),
        ((1, 2.0), [1.0], bytearray(b"x"), 4),
    ]
    assert match_local(rec, sto).tolist() == [[7, 3], [-1, 4]]
    assert np.asarray(match_local([], [])).shape == (0, 2)
