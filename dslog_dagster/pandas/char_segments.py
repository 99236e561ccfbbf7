"""Character segments of tracked pandas string columns, and their character tables.

The model is :mod:`dslog_dagster.core.characters`: a string column's characters form a
``(row, character)`` space, and an output column cut from input columns gets one ProvRC table
per input column between their character spaces. pandas is eager, so a tracked string series
knows, the moment a string method runs, where each of its characters came from. It keeps that
as *segments*: "characters ``o .. o+n-1`` of this cell are characters ``i .. i+n-1`` of cell
``(row, col)`` of input ``inp``" (``tok >= 0``: of token ``tok`` of a list cell made by
``split``). A *coarse* segment says "every character of this cell ← every character of that
input range": a cell whose characters could not be placed, never a guess.

Segments live in one append-only table per capture (:class:`Segments`). A column points at
them through a *character slot*: a :class:`~dslog_dagster.pandas.rows.RowMap` from its rows to
segment ids, registered among the capture's slots (input index ``-1``), so every row rule of
the pandas capture (filters, sorts, joins, explode, group keys) moves the characters with the
rows and nothing else needs to know about them.

Every step is NumPy over arrays of segments (no Python loop per row). At the end
(:func:`character_lineage`) each exact segment is checked against the values, character by
character (code points, as arrays of ``uint32``; up to case for ``lower``/``upper``): a cell
whose segments do not check out becomes coarse and is counted.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from dslog_dagster.core.characters import CharacterLineage, CharacterTable
from dslog_dagster.core.compression import compress
from dslog_dagster.core.int_sets import sorted_unique
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.pandas.rows import I64, RowMap, ranges

__all__ = [
    "SPACE",
    "Segments",
    "character_lineage",
    "compose",
    "input_chars",
    "is_text",
    "lengths",
    "made_coarse",
    "select_tokens",
    "union",
]

SPACE = 2**31
"""The ``n_src`` of every character slot's row map (segment ids are below it)."""

_INT = ("inp", "col", "row", "i", "n", "o", "tok")
_BOOL = ("coarse", "cased")


@dataclass(eq=False)
class Segments:
    """The capture's segments: parallel arrays, appended in chunks, concatenated on read."""

    chunks: list[dict[str, np.ndarray]] = field(default_factory=list)
    size: int = 0
    _cat: dict[str, np.ndarray] | None = None

    def add(self, **cols: np.ndarray) -> I64:
        """Append segments (every field of ``_INT`` and ``_BOOL``); their ids."""
        n = len(cols["row"])
        chunk = {k: np.asarray(cols[k], np.int64) for k in _INT}
        chunk.update({k: np.asarray(cols[k], bool) for k in _BOOL})
        self.chunks.append(chunk)
        ids = np.arange(self.size, self.size + n, dtype=np.int64)
        self.size += n
        self._cat = None
        if self.size >= SPACE:
            msg = "more than 2**31 character segments in one capture"
            raise OverflowError(msg)
        return ids

    def arrays(self) -> dict[str, np.ndarray]:
        if self._cat is None:
            keys = (*_INT, *_BOOL)
            if not self.chunks:
                self._cat = {k: np.zeros(0, bool if k in _BOOL else np.int64) for k in keys}
            else:
                self._cat = {k: np.concatenate([c[k] for c in self.chunks]) for k in keys}
                self.chunks = [self._cat]
        return self._cat


def is_text(values: pd.Series) -> bool:
    """Every non-null value is a ``str`` (pandas' C type inference, no Python loop)."""
    return pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty")


def lengths(values: pd.Series) -> I64:
    """Length in code points of each ``str`` value; ``0`` for nulls and non-strings."""
    got = values.str.len() if is_text(values) or values.dtype == object else None
    if got is None:
        return np.zeros(len(values), np.int64)
    return np.asarray(pd.to_numeric(got, errors="coerce").fillna(0).to_numpy(), np.int64)


def _slot(
    segs: Segments, ctx_slots: dict[int, tuple[int, RowMap]], out: I64, ids: I64, n: int
) -> int:
    sid = len(ctx_slots)
    ctx_slots[sid] = (-1, RowMap.from_pairs(out, ids, n, SPACE))
    return sid


def input_chars(
    segs: Segments, slots: dict[int, tuple[int, RowMap]], inp: int, col: int, values: pd.Series
) -> int | None:
    """The character slot of input column ``col`` of input ``inp`` (each cell's characters
    are themselves), or ``None`` when the column does not hold strings."""
    if not is_text(values):
        return None
    lens = lengths(values)
    rows = np.flatnonzero(lens > 0).astype(np.int64)
    k = rows.size
    zero = np.zeros(k, np.int64)
    ids = segs.add(
        inp=np.full(k, inp), col=np.full(k, col), row=rows, i=zero, n=lens[rows], o=zero,
        tok=np.full(k, -1), coarse=np.zeros(k, bool), cased=np.zeros(k, bool),
    )  # fmt: skip
    return _slot(segs, slots, rows, ids, len(values))


def compose(
    segs: Segments,
    slots: dict[int, tuple[int, RowMap]],
    arg: int,
    prow: I64,
    orow: I64,
    a: I64,
    b: I64,
    ln: I64,
    n_out: int,
    keep_coarse: npt.NDArray[np.bool_],
    *,
    tok: I64 | None = None,
    cased: bool = False,
    rough_piece: npt.NDArray[np.bool_] | None = None,
) -> int:
    """A new character slot made of *pieces*: piece ``p`` puts characters ``b[p] ..
    b[p]+ln[p]-1`` of row ``prow[p]`` of the argument (slot ``arg``) at characters ``a[p]..``
    of output row ``orow[p]`` (of token ``tok[p]`` when given). The argument's exact segments
    are cut to the piece and shifted; its coarse ones (and list-cell ones) stay coarse where
    ``keep_coarse[p]``. ``cased``: the piece's characters are the argument's up to case;
    ``rough_piece[p]``: the piece could not be placed (its segments become coarse).
    """
    m = slots[arg][1]
    indptr = np.searchsorted(m.out, np.arange(m.n_out + 1, dtype=np.int64)).astype(np.int64)
    prow = np.asarray(prow, np.int64)
    cnt = (indptr[prow + 1] - indptr[prow]).astype(np.int64)
    piece = np.repeat(np.arange(prow.size, dtype=np.int64), cnt)
    sid = m.src[ranges(indptr[prow], cnt)]
    s = segs.arrays()
    so, sn, si = s["o"][sid], s["n"][sid], s["i"][sid]
    rough = s["coarse"][sid] | (s["tok"][sid] >= 0)
    if rough_piece is not None:
        rough = rough | np.asarray(rough_piece, bool)[piece]
    pa, pb, pl = np.asarray(a)[piece], np.asarray(b)[piece], np.asarray(ln)[piece]
    lo = np.maximum(so, pb)
    hi = np.minimum(so + sn, pb + pl)
    exact = ~rough & (hi > lo)
    coarse = rough & np.asarray(keep_coarse, bool)[piece]
    keep = exact | coarse
    k = int(keep.sum())
    ptok = np.full(prow.size, -1, np.int64) if tok is None else np.asarray(tok, np.int64)
    ids = segs.add(
        inp=s["inp"][sid][keep], col=s["col"][sid][keep], row=s["row"][sid][keep],
        i=np.where(exact, si + lo - so, si)[keep], n=np.where(exact, hi - lo, sn)[keep],
        o=np.where(exact, pa + lo - pb, 0)[keep], tok=ptok[piece][keep],
        coarse=coarse[keep], cased=(s["cased"][sid] | cased)[keep],
    )  # fmt: skip
    assert ids.size == k
    return _slot(segs, slots, np.asarray(orow, np.int64)[piece][keep], ids, n_out)


def made_coarse(
    segs: Segments, slots: dict[int, tuple[int, RowMap]], arg: int, nonempty: np.ndarray
) -> int:
    """Every segment of each row made coarse (the value came from those characters in a way
    without a rule), for the rows where ``nonempty``."""
    n = slots[arg][1].n_out
    rows = np.arange(n, dtype=np.int64)
    zero = np.zeros(n, np.int64)
    keep = np.asarray(nonempty, bool)
    return compose(segs, slots, arg, rows, rows, zero, zero, zero, n, keep, rough_piece=keep | True)


def union(slots: dict[int, tuple[int, RowMap]], a: int, b: int) -> int:
    """A slot with the segments of both slots (parts of one value, or disjoint rows)."""
    sid = len(slots)
    slots[sid] = (-1, slots[a][1].union(slots[b][1]))
    return sid


def select_tokens(
    segs: Segments, slots: dict[int, tuple[int, RowMap]], arg: int, src: I64, want: I64
) -> int:
    """Row ``r`` of the result is token ``want[r]`` of row ``src[r]`` of a list column (slot
    ``arg``): that token's segments as a string cell's (``-1``: no token, no characters).
    Coarse segments of the row stay with every token that has characters."""
    src = np.asarray(src, np.int64)
    want = np.asarray(want, np.int64)
    m = slots[arg][1].take(np.where(want >= 0, src, -1))
    s = segs.arrays()
    t = s["tok"][m.src]
    keep = t == want[m.out]
    sid = m.src[keep]
    ids = segs.add(
        inp=s["inp"][sid], col=s["col"][sid], row=s["row"][sid], i=s["i"][sid],
        n=s["n"][sid], o=s["o"][sid], tok=np.full(sid.size, -1), coarse=s["coarse"][sid],
        cased=s["cased"][sid],
    )  # fmt: skip
    return _slot(segs, slots, m.out[keep], ids, int(src.size))


def _codepoints(values: pd.Series, extent: int) -> np.ndarray:
    """``(rows, extent)`` code points of the ``str`` values (0 past the end and for nulls)."""
    n = len(values)
    if extent == 0 or n == 0:
        return np.zeros((n, max(extent, 1)), np.uint32)
    obj = values.to_numpy(dtype=object)
    text = np.where(pd.isna(obj), "", obj).astype(f"U{extent}")
    return np.ascontiguousarray(text).view(np.uint32).reshape(n, extent)


def _lower(cp: np.ndarray) -> np.ndarray:
    """Code points lowered one by one (for comparing ``lower``/``upper`` results)."""
    chars = np.ascontiguousarray(cp, np.uint32).view("U1")
    return np.asarray(np.char.lower(chars), "U1").view(np.uint32).reshape(cp.shape)


def _keys(inp: I64, col: I64) -> list[tuple[int, int]]:
    """The distinct ``(input, column)`` pairs of some segments (NumPy, not a set of rows)."""
    if not inp.size:
        return []
    width = int(col.max()) + 1
    both = sorted_unique(inp * width + col)
    return [(int(k // width), int(k % width)) for k in both]


def character_lineage(
    slots: dict[int, tuple[int, RowMap]],
    segs: Segments,
    columns: Sequence[tuple[str, int | None, set[tuple[int, int]]]],
    values: Sequence[pd.Series],
    input_names: Sequence[str],
    input_columns: Sequence[Sequence[str]],
    input_values: Mapping[tuple[int, int], pd.Series],
) -> CharacterLineage:
    """The character tables of an output: per output column ``(name, char slot, contributing
    (input, column) pairs)`` with its values, one table per (input, input column) among the
    segments' and the contributing string columns. String columns with contributing cells but
    no slot are listed in ``whole_cell``."""
    s = segs.arrays()
    tables: list[CharacterTable] = []
    whole: dict[str, str] = {}
    coarse_cells: dict[str, int] = {}
    in_cp: dict[tuple[int, int], np.ndarray] = {}

    def cp_in(key: tuple[int, int]) -> np.ndarray:
        if key not in in_cp:
            v = input_values[key]
            in_cp[key] = _codepoints(v, int(lengths(v).max(initial=0)))
        return in_cp[key]

    for (name, slot, contrib), vals in zip(columns, values, strict=True):
        if not is_text(vals):
            continue
        if slot is None:
            if contrib:
                whole[name] = (
                    "it was made by an operation without a character rule (a cast, `map`, a "
                    "merge key, an aggregate's value, `fillna` from another column...)"
                )
            continue
        out_len = lengths(vals)
        extent = int(out_len.max(initial=0))
        m = slots[slot][1]
        orow, sid = m.out, m.src
        live = out_len[orow] > 0
        orow, sid = orow[live], sid[live]
        coarse = s["coarse"][sid].copy()
        ok = coarse | (s["o"][sid] + s["n"][sid] <= out_len[orow])
        out_cp = _codepoints(vals, extent)
        used = _keys(s["inp"][sid], s["col"][sid])
        for key in used:
            sel = np.flatnonzero((s["inp"][sid] == key[0]) & (s["col"][sid] == key[1]) & ~coarse)
            icp = cp_in(key)
            fits = s["i"][sid][sel] + s["n"][sid][sel] <= icp.shape[1]
            ok[sel[~fits]] = False
            sel = sel[fits]
            n = s["n"][sid][sel]
            t = ranges(np.zeros(sel.size, np.int64), n)
            rep = np.repeat(sel, n)
            oc = out_cp[orow[rep], np.minimum(s["o"][sid][rep] + t, out_cp.shape[1] - 1)]
            ic = icp[s["row"][sid][rep], s["i"][sid][rep] + t]
            cased = s["cased"][sid][rep]
            same = oc == ic
            if cased.any():
                same[cased] = _lower(oc[cased]) == _lower(ic[cased])
            bad = np.unique(rep[~same])
            ok[bad] = False
        bad_rows = np.unique(orow[~ok | coarse])
        rough = np.isin(orow, bad_rows)
        if bad_rows.size:
            coarse_cells[name] = int(bad_rows.size)
        keys = set(used)
        keys |= {k for k in contrib if k in input_values}
        for key in sorted(keys):
            sel = np.flatnonzero((s["inp"][sid] == key[0]) & (s["col"][sid] == key[1]))
            ex = sel[~rough[sel]]
            n = s["n"][sid][ex]
            t = ranges(np.zeros(ex.size, np.int64), n)
            rep = np.repeat(ex, n)
            o_r, o_c = orow[rep], s["o"][sid][rep] + t
            i_r, i_c = s["row"][sid][rep], s["i"][sid][rep] + t
            co = sel[rough[sel]]
            olen = out_len[orow[co]]
            t1 = ranges(np.zeros(co.size, np.int64), olen)
            r1 = np.repeat(co, olen)
            # a coarse cell: every character <- every character of its input cells (whole
            # cells: the ranges under a coarse or failed placement are not vouched for)
            in_len = lengths(input_values[key])
            n1 = in_len[s["row"][sid][r1]]
            t2 = ranges(np.zeros(r1.size, np.int64), n1)
            r2 = np.repeat(r1, n1)
            o_r = np.concatenate([o_r, orow[r2]])
            o_c = np.concatenate([o_c, np.repeat(t1, n1)])
            i_r = np.concatenate([i_r, s["row"][sid][r2]])
            i_c = np.concatenate([i_c, t2])
            in_shape = (len(in_len), int(in_len.max(initial=0)))
            rel = LineageRelation.from_columns(
                (len(vals), extent), in_shape, [o_r, o_c], [i_r, i_c]
            )
            table = compress(rel.unique(), fallback="never", progression=False)
            names = (input_names[key[0]], input_columns[key[0]][key[1]])
            tables.append(CharacterTable(name, names[0], names[1], table))
    return CharacterLineage(tuple(tables), whole, coarse_cells)
