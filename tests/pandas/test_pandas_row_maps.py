"""Row maps with one source row per row (``RowMap.single``) take the short paths of ``take``
and ``gather``; they must give exactly the pairs of the general paths."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.pandas.rows import RowMap


def _general(m: RowMap) -> RowMap:
    """The same pairs without the flag, so the general code runs."""
    return RowMap(m.out.copy(), m.src.copy(), m.n_out, m.n_src)


def _pairs(m: RowMap) -> list[tuple[int, int]]:
    assert np.all(np.diff(m.out * max(m.n_src, 1) + m.src) > 0)  # sorted, no repeats
    return list(zip(m.out.tolist(), m.src.tolist(), strict=True))


@st.composite
def _single_maps(draw: st.DrawFn) -> RowMap:
    n = draw(st.integers(0, 12))
    n_src = draw(st.integers(max(n, 1), 20))
    src = np.asarray(draw(st.lists(st.integers(0, n_src - 1), min_size=n, max_size=n)), np.int64)
    return RowMap(np.arange(n, dtype=np.int64), src, n, n_src, single=True)


@settings(max_examples=200, deadline=None)
@given(_single_maps(), st.data())
def test_take_on_single_maps_equals_the_general_take(m: RowMap, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, 15))
    lo = -1 if data.draw(st.booleans()) else 0  # -1: a row from nowhere (outer joins)
    positions = np.asarray(
        data.draw(st.lists(st.integers(lo, max(m.n_out - 1, lo)), min_size=k, max_size=k))
        if m.n_out
        else [-1] * k,
        np.int64,
    )
    fast, slow = m.take(positions), _general(m).take(positions)
    assert (fast.n_out, fast.n_src) == (slow.n_out, slow.n_src)
    assert _pairs(fast) == _pairs(slow)
    if fast.single:  # the flag is only kept where it is true
        assert np.array_equal(fast.out, np.arange(fast.n_out))


@settings(max_examples=200, deadline=None)
@given(_single_maps(), st.data())
def test_gather_on_single_maps_equals_the_general_gather(m: RowMap, data: st.DataObject) -> None:
    if m.n_out == 0:
        return
    k = data.draw(st.integers(0, 20))
    n_new = data.draw(st.integers(1, 6))
    out = np.asarray(data.draw(st.lists(st.integers(0, n_new - 1), min_size=k, max_size=k)))
    rows = np.asarray(data.draw(st.lists(st.integers(0, m.n_out - 1), min_size=k, max_size=k)))
    fast = m.gather(out.astype(np.int64), rows.astype(np.int64), n_new)
    slow = _general(m).gather(out.astype(np.int64), rows.astype(np.int64), n_new)
    assert _pairs(fast) == _pairs(slow)
    assert not fast.single or np.array_equal(fast.out, np.arange(fast.n_out))


def test_identity_is_single_and_a_filter_keeps_it() -> None:
    m = RowMap.identity(5)
    assert m.single
    t = m.take(np.array([4, 0, 2], np.int64))
    assert t.single
    assert t.src.tolist() == [4, 0, 2]
    u = m.take(np.array([1, -1, 3], np.int64))  # a missing row: not one pair per row
    assert not u.single
    assert _pairs(u) == [(0, 1), (2, 3)]
