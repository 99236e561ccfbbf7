"""Locations inside a value: a NumPy crop's lineage is its window, and a character table's
trace (core.characters) against a brute-force walk of its pairs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation, capture, compress
from dslog_dagster.core.characters import trace_characters


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 7),
    st.integers(1, 7),
    st.data(),
)
def test_a_crop_is_the_window(h: int, w: int, data: st.DataObject) -> None:
    # PROVision's crop: output (i, j) <- input (r0 + i, c0 + j), one ProvRC row
    x = np.arange(h * w, dtype=np.float64).reshape(h, w)
    r0 = data.draw(st.integers(0, h - 1))
    r1 = data.draw(st.integers(r0 + 1, h))
    c0 = data.draw(st.integers(0, w - 1))
    c1 = data.draw(st.integers(c0 + 1, w))
    r = capture(lambda a: a[r0:r1, c0:c1], x)
    np.testing.assert_array_equal(r.value, x[r0:r1, c0:c1])
    i, j = np.indices((r1 - r0, c1 - c0)).reshape(2, -1)
    window = LineageRelation.from_columns((r1 - r0, c1 - c0), (h, w), [i, j], [i + r0, j + c0])
    assert r.relation(0, 0) == window
    assert compress(r.relation(0, 0)).rows == 1
    # a crop of a crop is the crop of the offsets added (PROVision Table II)
    rr = capture(lambda a: a[r0:r1, c0:c1][r1 - r0 - 1 :, :1], x)
    assert rr.relation(0, 0).pairs().tolist() == [[0, 0, r1 - 1, c0]]


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_trace_characters_is_the_brute_force_walk(data: st.DataObject) -> None:
    rows = data.draw(st.integers(1, 5))
    ext = data.draw(st.integers(1, 6))
    in_rows, in_ext = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 6))
    cell = st.tuples(
        st.integers(0, rows - 1),
        st.integers(0, ext - 1),
        st.integers(0, in_rows - 1),
        st.integers(0, in_ext - 1),
    )
    pairs = sorted(set(data.draw(st.lists(cell, min_size=1, max_size=30))))
    p = np.asarray(pairs, np.int64).T
    rel = LineageRelation.from_columns((rows, ext), (in_rows, in_ext), [p[0], p[1]], [p[2], p[3]])
    table = compress(rel)
    row = data.draw(st.integers(0, rows - 1))
    start = data.draw(st.integers(0, ext))
    stop = data.draw(st.integers(start, ext))
    got = trace_characters(table, "x", "c", row, start, stop)
    want: dict[int, set[int]] = {}
    for o, oc, r, ic in pairs:
        if o == row and start <= oc < stop:
            want.setdefault(r, set()).add(ic)
    seen: dict[int, set[int]] = {}
    for g in got:
        assert (g.input, g.column, g.whole) == ("x", "c", False)
        assert g.stop is not None
        assert g.start < g.stop
        chars = set(range(g.start, g.stop))
        assert not chars & seen.get(g.row, set())  # maximal, disjoint ranges
        seen.setdefault(g.row, set()).update(chars)
    assert seen == want
    # maximal: no two ranges of one row touch
    ends = {(g.row, g.stop) for g in got}
    assert not any((g.row, g.start) in ends for g in got)
