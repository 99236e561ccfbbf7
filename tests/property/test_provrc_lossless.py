"""ProvRC is lossless: decompress(compress(R)) == dedupe(R), in both orientations.

Relations are built from the structures ProvRC is meant to find (all-to-all boxes, relative,
mirrored, strided and pooling attributes) mixed with random noise and duplicates, over ranks
0–4 on both sides, so every merge path of the compressor (and the columnar fallback) runs.
"""

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.storage import (
    table_from_blob,
    table_from_bytes,
    table_to_blob,
    table_to_bytes,
)

MAX_PAIRS = 4000


def _component(rng: np.random.Generator, osh: tuple[int, ...], ish: tuple[int, ...], kind: str):
    """Pairs (out (l, n), in (m, n)) of one structured component, clipped to the shapes."""
    l, m = len(osh), len(ish)
    # a random output sub-box
    lo = [int(rng.integers(0, d)) for d in osh]
    hi = [int(rng.integers(a, d)) for a, d in zip(lo, osh, strict=True)]
    grids = np.meshgrid(*[np.arange(a, b + 1) for a, b in zip(lo, hi, strict=True)], indexing="ij")
    outs = np.stack([g.ravel() for g in grids]) if l else np.zeros((0, 1), np.int64)
    n = outs.shape[1]
    if kind == "noise":
        k = int(rng.integers(1, 60))
        o = np.stack([rng.integers(0, d, k) for d in osh]) if l else np.zeros((0, k), np.int64)
        i = np.stack([rng.integers(0, d, k) for d in ish]) if m else np.zeros((0, k), np.int64)
        return o, i
    # each input attribute: absolute range, or a function of one output attribute plus a range
    ins_lo: list[np.ndarray] = []
    widths: list[int] = []
    for d in ish:
        mode = kind if kind != "mixed" else rng.choice(["box", "rel", "mirror", "stride", "pool"])
        if l == 0 or mode == "box":
            a = int(rng.integers(0, d))
            ins_lo.append(np.full(n, a))
            widths.append(int(rng.integers(0, d - a)) + 1)
            continue
        b = outs[int(rng.integers(0, l))]
        c = int(rng.integers(-3, 4))
        if mode == "rel":
            base = b + c
        elif mode == "mirror":
            base = int(rng.integers(0, d + 3)) - b
        elif mode == "stride":  # a = ±floor((b + s) / k) + c: repeat, phase-shifted, mirrored
            k = int(rng.integers(1, 5))
            sign = int(rng.choice([-1, 1]))
            base = sign * ((b + int(rng.integers(0, k))) // k) + c + (d if sign < 0 else 0)
        else:  # pool: a = ±k·b + c
            sign = int(rng.choice([-1, 1]))
            base = sign * b * int(rng.integers(2, 4)) + c + (d if sign < 0 else 0)
        ins_lo.append(base)
        widths.append(int(rng.integers(1, 3)))
    if m == 0:
        return outs, np.zeros((0, n), np.int64)
    # expand each output cell into its input box
    per_cell = int(np.prod(widths))
    offs = np.stack(
        [g.ravel() for g in np.meshgrid(*[np.arange(w) for w in widths], indexing="ij")]
    )
    o = np.repeat(outs, per_cell, axis=1)
    i = np.repeat(np.stack(ins_lo), per_cell, axis=1) + np.tile(offs, n)
    ok = np.all((i >= 0) & (i < np.array(ish)[:, None]), axis=0)
    return o[:, ok], i[:, ok]


@st.composite
def relations(draw: Any) -> LineageRelation:
    l = draw(st.integers(0, 4))
    m = draw(st.integers(0, 4))
    osh = tuple(draw(st.lists(st.integers(1, 7), min_size=l, max_size=l)))
    ish = tuple(draw(st.lists(st.integers(1, 7), min_size=m, max_size=m)))
    kinds = draw(
        st.lists(
            st.sampled_from(["box", "rel", "mirror", "stride", "pool", "mixed", "noise"]),
            min_size=1,
            max_size=4,
        )
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    outs, ins = [], []
    for kind in kinds:
        o, i = _component(rng, osh, ish, kind)
        outs.append(o)
        ins.append(i)
    o = np.concatenate(outs, axis=1)[:, :MAX_PAIRS]
    i = np.concatenate(ins, axis=1)[:, :MAX_PAIRS]
    n = o.shape[1]
    perm = rng.permutation(n)
    dup = rng.integers(0, max(n, 1), size=n // 5) if n else np.zeros(0, np.int64)
    sel = np.concatenate([perm, dup]).astype(np.int64)
    if l + m == 0:
        return LineageRelation.from_columns((), (), [], [], n=int(len(sel) > 0))
    return LineageRelation.from_columns(osh, ish, list(o[:, sel]), list(i[:, sel]))


SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(rel=relations())
def test_compress_is_lossless_backward(rel: LineageRelation) -> None:
    table = compress(rel)
    assert table.decompress() == rel
    assert table.n_pairs == rel.unique().n


@SETTINGS
@given(rel=relations(), fallback=st.sampled_from(["never", "always", "auto"]))
def test_stored_table_roundtrips(rel: LineageRelation, fallback: str) -> None:
    table = compress(rel, fallback=fallback)  # type: ignore[arg-type]
    for back in (table_from_bytes(table_to_bytes(table)), table_from_blob(table_to_blob(table))):
        assert back.encoding == table.encoding
        assert back.rows == table.rows
        assert back.n_pairs == table.n_pairs
        assert back.decompress() == rel


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rel=relations())
def test_forward_orientation_is_the_same_relation(rel: LineageRelation) -> None:
    table = compress(rel, fallback="never")
    fwd = table.forward()
    # the hulls bound every input cell of the relation
    assert fwd.expand() == rel


@SETTINGS
@given(rel=relations(), relative=st.booleans(), mirrored=st.booleans(), progression=st.booleans())
def test_every_candidate_set_is_lossless(
    rel: LineageRelation, relative: bool, mirrored: bool, progression: bool
) -> None:
    table = compress(
        rel, relative=relative, mirrored=mirrored, progression=progression, fallback="never"
    )
    assert table.decompress() == rel


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (2, 2, 3, 2)])
def test_identity_of_any_rank_is_one_row(shape: tuple[int, ...]) -> None:
    idx = np.indices(shape).reshape(len(shape), -1)
    rel = LineageRelation.from_columns(shape, shape, list(idx), list(idx))
    table = compress(rel, fallback="never")
    assert table.rows == 1
    assert table.forward().expand() == rel
