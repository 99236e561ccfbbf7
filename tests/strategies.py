"""Hypothesis strategies shared by the property tests: lineage relations with structure.

Relations are built from the structures ProvRC is meant to find (all-to-all boxes, relative,
mirrored, strided and pooling attributes) mixed with random noise and duplicates, so every
merge path of the compressor, the columnar fallback and every query case gets exercised.
"""

from typing import Any

import numpy as np
from hypothesis import strategies as st

from dslog_dagster.core import LineageRelation

KINDS = ["box", "rel", "mirror", "stride", "pool", "mixed", "noise"]

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
            st.sampled_from(KINDS),
            min_size=1,
            max_size=4,
        )
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return relation_between(rng, osh, ish, kinds)


def relation_between(
    rng: np.random.Generator, osh: tuple[int, ...], ish: tuple[int, ...], kinds: list[str]
) -> LineageRelation:
    """A random relation between arrays of the given shapes made of ``kinds`` components."""
    l, m = len(osh), len(ish)
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


@st.composite
def interval_lineage(
    draw: Any, *, repeats: bool = False
) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    """``(n_out, n_in, out_rows, lo, hi)``: one input interval per output row, as an
    aggregation's range summaries give them.

    Built from blocks: runs whose ``lo`` advances by a step (positive, negative or zero) every
    ``q`` rows, entered at any phase, with one width, and blocks of random intervals of
    random widths; gaps between blocks leave output rows without ids, and the rows may come
    in any order. With ``repeats`` some output rows get a second interval.
    """
    blocks = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["run", "random"]),
                st.integers(1, 12),  # rows
                st.integers(-4, 4),  # step
                st.integers(1, 3),  # q
                st.integers(0, 2),  # phase within the first period
                st.integers(0, 4),  # width
                st.integers(0, 2),  # gap before the block
            ),
            max_size=6,
        )
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows, los, widths = [], [], []
    at = 0
    for kind, k, step, q, phase, width, gap in blocks:
        at += gap
        rows.append(np.arange(at, at + k))
        at += k
        if kind == "run":
            los.append(int(rng.integers(0, 40)) + step * ((np.arange(k) + phase % q) // q))
            widths.append(np.full(k, width))
        else:
            los.append(rng.integers(0, 40, k))
            widths.append(rng.integers(0, 5, k))
    out_rows = np.concatenate(rows or [np.zeros(0)]).astype(np.int64)
    lo = np.concatenate(los or [np.zeros(0)]).astype(np.int64)
    hi = lo + np.concatenate(widths or [np.zeros(0)]).astype(np.int64)
    if len(lo):
        hi -= lo.min()
        lo -= lo.min()
    if repeats and len(out_rows):
        again = rng.integers(0, len(out_rows), draw(st.integers(1, 5)))
        extra_lo = rng.integers(0, 40, len(again))
        out_rows = np.concatenate([out_rows, out_rows[again]])
        lo = np.concatenate([lo, extra_lo])
        hi = np.concatenate([hi, extra_lo + rng.integers(0, 5, len(again))])
    if draw(st.booleans()):
        order = rng.permutation(len(out_rows))
        out_rows, lo, hi = out_rows[order], lo[order], hi[order]
    n_out = (int(out_rows.max()) + 1 if len(out_rows) else 1) + draw(st.integers(0, 2))
    n_in = (int(hi.max()) + 1 if len(hi) else 1) + draw(st.integers(0, 2))
    return n_out, n_in, out_rows, lo, hi
