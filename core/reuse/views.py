"""Generalised provenance views: ProvRC tables whose endpoints are affine in the extents.

A *dimensional* view is just the ProvRC tables of one call, reused for calls with the same
shapes. A *generalised* view (:class:`GenTemplate`) is learnt from tables captured at several
shapes of one shape class (:func:`~dslog_dagster.core.reuse.keys.shape_class`): every integer
field of every row (``out_lo``, ``out_hi``, ``in_lo``, ``in_hi``, ``in_q``, ``in_r``,
``in_mult``, ``in_ref``) is written as

    value = c + k_1·D_1 + ... + k_p·D_p

where ``D_s`` are the class's symbolic extents (input *and* output axes; equal axes share a
symbol). This covers the papers' ``[0, D-1]`` and also ``D``, ``k·D + c`` and boundaries that
move with an extent (tile offsets ``D``, ``2D - 1``, flip's mirrored offset ``1 - D``, kron's
stride ``q = D``, concatenation offsets ``D_1 + D_2``). Rows whose count grows with an extent
form *row families* (:func:`_segments`): a run of rows stepping by one constant vector is
stored as (count, first row, step), each affine in the extents — cumsum's prefixes, ravel's
row blocks, kron's tiles, cross's per-row pattern. :func:`fit` finds, per value, the
sparsest small-integer ``k`` that makes ``value - k·D`` constant over the observations
(preferring small coefficients and small constants), and :meth:`GenTemplate.instantiate`
evaluates the template at a new shape into an ordinary ProvRC
:class:`~dslog_dagster.core.provrc.LineageTable` (validated: bounds, non-empty intervals).

A template never claims more than the observations show: the segment structure and the
relative structure must be identical in every observation, and a template is only served
after it has *predicted* further captures (:mod:`.prediction`) and passed verification
(:mod:`.verification`).

A view's tables are keyed by :data:`TableKey` ``(relation, output, input)``; which relations a
view holds depends on the mode it was keyed by (:data:`PARTS`).
"""

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.compression import compress
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation, Shape

__all__ = [
    "CONSIDERED_ONLY",
    "FIELDS",
    "PARTS",
    "GenTemplate",
    "TableKey",
    "TableTemplate",
    "compress_all",
    "considered",
    "contributing",
    "fit",
    "only_parts",
    "table_sets_equal",
    "tables_equal",
]

I64 = npt.NDArray[np.int64]
#: (which relation: 0 contributing / 1 considered, output index, input index)
TableKey = tuple[int, int, int]

#: The relations (0 contributing, 1 considered) a view of each key mode holds. A
#: ``considered-only`` view is learnt from ``mode="considered"`` captures and serves
#: ``need="considered"`` calls: it holds the considered relation alone.
PARTS: dict[str, tuple[int, ...]] = {
    "contributing": (0,),
    "considered": (0, 1),
    "considered-only": (1,),
}
#: The key mode of views of the considered relation alone.
CONSIDERED_ONLY = "considered-only"

#: The integer fields of a ProvRC row, in storage order (outputs, then inputs).
FIELDS = ("out_lo", "out_hi", "in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")
_OUT_FIELDS = ("out_lo", "out_hi")
# Relations bigger than this are not re-compressed without the columnar fallback just to try
# generalising them: lineage that big and unstructured never generalises.
MAX_GENERALISE_PAIRS = 200_000
# Decompressed comparison of two equivalent-but-differently-encoded tables is done up to here.
MAX_COMPARE_PAIRS = 5_000_000


def _coefficient_candidates(p: int) -> I64:
    """Candidate ``k`` vectors, preferred first: 0, one symbol, two symbols, three with 1s."""
    cands: list[list[int]] = [[0] * p]
    for s in range(p):
        for c in (1, -1, 2, -2, 3, -3, 4, -4):
            k = [0] * p
            k[s] = c
            cands.append(k)
    for s, t in itertools.combinations(range(p), 2):
        for cs in (1, -1, 2, -2):
            for ct in (1, -1, 2, -2):
                k = [0] * p
                k[s], k[t] = cs, ct
                cands.append(k)
    for trio in itertools.combinations(range(p), 3):
        for signs in itertools.product((1, -1), repeat=3):
            k = [0] * p
            for s, sg in zip(trio, signs, strict=True):
                k[s] = sg
            cands.append(k)
    return np.asarray(cands, dtype=np.int64).reshape(len(cands), p)


def as_provrc(table: LineageTable) -> LineageTable | None:
    """``table`` in ProvRC form for generalisation, or None when it is too big to try."""
    if table.encoding == "provrc":
        return table
    if table.n_pairs > MAX_GENERALISE_PAIRS:
        return None
    return compress(table.decompress(), fallback="never")


def _row_matrix(t: LineageTable) -> I64:
    """``(rows, 2l + 6m)``: one vector per ProvRC row, fields in FIELDS order."""
    if t.rows == 0:  # an empty relation (every output cell is a constant)
        return np.zeros((0, _width(t.out_rank, t.in_rank)), np.int64)
    cols = [np.asarray(getattr(t, f), np.int64).reshape(-1, t.rows) for f in FIELDS]
    mat = np.vstack(cols) if cols else np.zeros((0, t.rows), np.int64)
    return np.ascontiguousarray(mat.T)


def _width(l: int, m: int) -> int:
    return 2 * l + 6 * m


# A run of at least this many rows whose fields step by one constant vector is a row family.
MIN_FAMILY = 3


def _segments(mat: I64) -> list[tuple[int, I64, I64]]:
    """Split rows into segments ``(count, first row, step)``: maximal arithmetic runs of at
    least :data:`MIN_FAMILY` rows are families, the other rows are singles (count 1, step 0).

    Families are what lets a view generalise lineage whose row count grows with an extent
    (cumsum's prefixes, ravel's row blocks, kron's tiles, cross's per-row pattern).
    """
    rows = mat.shape[0]
    zero = np.zeros(mat.shape[1], np.int64)
    out: list[tuple[int, I64, I64]] = []
    i = 0
    while i < rows:
        if i + MIN_FAMILY <= rows:
            step = mat[i + 1] - mat[i]
            j = i + 1
            while j + 1 < rows and np.array_equal(mat[j + 1] - mat[j], step):
                j += 1
            if j - i + 1 >= MIN_FAMILY and step.any():
                out.append((j - i + 1, mat[i], step))
                i = j + 1
                continue
        out.append((1, mat[i], zero))
        i += 1
    return out


@dataclass(frozen=True, slots=True)
class TableTemplate:
    """One table of a generalised view: a list of row segments whose row count, first row and
    step are affine in the symbols. ``coef`` is ``(n_segments, 1 + 2w, 1 + p)`` (count, first
    row's ``w`` fields, step's ``w`` fields); value = coef·[1, D_1..D_p]."""

    out_rank: int
    in_rank: int
    coef: I64

    def rows_at(self, values: Sequence[int]) -> I64 | None:
        """The row matrix at symbol values ``values`` (None if a count is negative)."""
        d = np.asarray([1, *values], dtype=np.int64)
        w = _width(self.out_rank, self.in_rank)
        ev = self.coef @ d  # (n_segments, 1 + 2w)
        blocks = []
        for seg in ev:
            n = int(seg[0])
            if n < 0:
                return None
            t = np.arange(n, dtype=np.int64)[:, None]
            blocks.append(seg[1 : 1 + w][None, :] + t * seg[1 + w :][None, :])
        return np.vstack(blocks) if blocks else np.zeros((0, w), np.int64)

    def to_json(self) -> dict[str, Any]:
        return {"out_rank": self.out_rank, "in_rank": self.in_rank, "coef": self.coef.tolist()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any], p: int) -> "TableTemplate":
        l, m = int(d["out_rank"]), int(d["in_rank"])
        coef = np.asarray(d["coef"], dtype=np.int64).reshape(-1, 1 + 2 * _width(l, m), 1 + p)
        return cls(l, m, coef)


def _split_rows(mat: I64, l: int, m: int) -> dict[str, I64]:
    out: dict[str, I64] = {}
    pos = 0
    for f in FIELDS:
        n = l if f in _OUT_FIELDS else m
        out[f] = np.ascontiguousarray(mat[:, pos : pos + n].T)
        pos += n
    return out


def _n_pairs(f: Mapping[str, I64], rows: int) -> int:
    if rows == 0:
        return 0
    widths = np.ones(rows, dtype=np.int64)
    for name_lo, name_hi in (("out_lo", "out_hi"), ("in_lo", "in_hi")):
        lo, hi = f[name_lo], f[name_hi]
        for j in range(lo.shape[0]):
            widths = widths * (hi[j] - lo[j] + 1)
    return int(widths.sum())


@dataclass(frozen=True, slots=True)
class GenTemplate:
    """A generalised view: one :class:`TableTemplate` per relation of the call."""

    p: int
    tables: Mapping[TableKey, TableTemplate]

    def instantiate(
        self,
        values: Sequence[int],
        in_shapes: Sequence[Shape],
        out_shapes: Sequence[Shape],
    ) -> dict[TableKey, LineageTable] | None:
        """The ProvRC tables at symbol values ``values``, or None if they would be invalid.

        Invalid means: a negative row count, an empty or inverted interval, ``in_q < 1``, an
        output interval or an input hull outside the arrays — the template does not describe
        this shape.
        """
        if len(values) != self.p:
            return None
        out: dict[TableKey, LineageTable] = {}
        for key, tt in self.tables.items():
            _, o, i = key
            if o >= len(out_shapes) or i >= len(in_shapes):
                return None
            osh, ish = tuple(out_shapes[o]), tuple(in_shapes[i])
            if (len(osh), len(ish)) != (tt.out_rank, tt.in_rank):
                return None
            mat = tt.rows_at(values)
            if mat is None:
                return None
            rows = mat.shape[0]
            f = _split_rows(mat, tt.out_rank, tt.in_rank)
            if rows:
                if (f["out_lo"] > f["out_hi"]).any() or (f["in_lo"] > f["in_hi"]).any():
                    return None
                if (f["in_q"] < 1).any():
                    return None
                if (f["in_ref"] < -1).any() or (f["in_ref"] >= tt.out_rank).any():
                    return None
                for j, d in enumerate(osh):
                    if (f["out_lo"][j] < 0).any() or (f["out_hi"][j] >= d).any():
                        return None
            table = LineageTable(
                osh,
                ish,
                "provrc",
                rows,
                _n_pairs(f, rows),
                f["out_lo"],
                f["out_hi"],
                f["in_ref"],
                f["in_q"],
                f["in_r"],
                f["in_mult"],
                f["in_lo"],
                f["in_hi"],
            )
            if rows:
                hlo, hhi = table.input_hulls()
                for k, d in enumerate(ish):
                    if (hlo[k] < 0).any() or (hhi[k] >= d).any():
                        return None
            out[key] = table
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "p": self.p,
            "tables": [[list(k), t.to_json()] for k, t in sorted(self.tables.items())],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GenTemplate":
        p = int(d["p"])
        tables = {
            (int(k[0]), int(k[1]), int(k[2])): TableTemplate.from_json(t, p) for k, t in d["tables"]
        }
        return cls(p, tables)


def _fit_columns(vals: I64, d: I64, cands: I64) -> I64 | None:
    """Per column of ``vals`` (n_obs, N): the preferred ``[c, k]`` with vals = c + d·k, or None
    if some column has no consistent candidate."""
    p = d.shape[1]
    sparsity = (cands != 0).sum(axis=1)
    l1 = np.abs(cands).sum(axis=1)
    pred = d @ cands.T  # (n_obs, n_cands)
    resid = vals[None, :, :] - pred.T[:, :, None]  # (n_cands, n_obs, N)
    consistent = (resid == resid[:, :1, :]).all(axis=1)
    if not consistent.any(axis=0).all():
        return None
    const = resid[:, 0, :]
    # Preference: fewer symbols, smaller coefficients; ties broken by the smaller constant.
    score = sparsity[:, None] * 10**12 + l1[:, None] * 10**8 + np.minimum(np.abs(const), 10**8 - 1)
    score = np.where(consistent, score, np.iinfo(np.int64).max)
    best = score.argmin(axis=0)
    n = vals.shape[1]
    coef = np.empty((n, 1 + p), dtype=np.int64)
    coef[:, 0] = const[best, np.arange(n)]
    coef[:, 1:] = cands[best]
    return coef


def _sorted_rows(mat: I64) -> I64:
    if mat.shape[0] < 2:
        return mat
    out: I64 = mat[np.lexsort(mat.T[::-1])]
    return out


def _fit_table(
    segs_per_obs: list[list[tuple[int, I64, I64]]], l: int, m: int, d: I64, cands: I64
) -> "TableTemplate | None":
    """One table's template from its segments in every observation (None if none fits)."""
    p = d.shape[1]
    w = _width(l, m)
    if len({tuple(n > 1 for n, _, _ in segs) for segs in segs_per_obs}) != 1:
        return None
    n_seg = len(segs_per_obs[0])
    vals = np.stack(
        [
            np.concatenate([np.concatenate([[n], first, step]) for n, first, step in segs])
            if segs
            else np.zeros(0, np.int64)
            for segs in segs_per_obs
        ]
    ).astype(np.int64)
    coef = _fit_columns(vals, d, cands) if vals.shape[1] else np.zeros((0, 1 + p), np.int64)
    if coef is None:
        return None
    coef = coef.reshape(n_seg, 1 + 2 * w, 1 + p)
    ref_lo = 2 * l  # in_ref occupies [2l, 2l + m) of a row vector
    for block in (1, 1 + w):
        if coef[:, block + ref_lo : block + ref_lo + m, 1:].any():
            return None
    return TableTemplate(l, m, coef)


def fit(
    observations: Sequence[tuple[Sequence[int], Mapping[TableKey, LineageTable]]],
) -> GenTemplate | None:
    """Fit a template to tables observed at several symbol values (None if none fits).

    Every observation must have the same relations and ranks, and its rows must split into
    the same sequence of singles and families (:func:`_segments`); each count, field and step
    then gets the preferred coefficient vector consistent with all observations (see the
    module docstring). ``in_ref`` (which output axis an input attribute follows) must not
    depend on the extents.
    """
    if not observations:
        return None
    p = len(observations[0][0])
    keys = sorted(observations[0][1])
    if any(sorted(tabs) != keys or len(vals) != p for vals, tabs in observations):
        return None
    d = np.asarray([list(v) for v, _ in observations], dtype=np.int64).reshape(-1, p)
    cands = _coefficient_candidates(p)
    templates: dict[TableKey, TableTemplate] = {}
    for k in keys:
        mats = []
        ranks = set()
        for _, tabs in observations:
            t = as_provrc(tabs[k])
            if t is None:
                return None
            ranks.add((t.out_rank, t.in_rank))
            mats.append(_row_matrix(t))
        if len(ranks) != 1:
            return None
        l, m = ranks.pop()
        # Rows are a set; try the compressor's order first, then the sorted order (which
        # turns interleaved families, as convolve's two boundary ramps, into runs).
        for order in ("native", "sorted"):
            ordered = mats if order == "native" else [_sorted_rows(x) for x in mats]
            tt = _fit_table([_segments(x) for x in ordered], l, m, d, cands)
            if tt is not None:
                templates[k] = tt
                break
        else:
            return None
    return GenTemplate(p, templates)


def tables_equal(a: LineageTable, b: LineageTable) -> bool:
    """Do two tables stand for the same relation? Field comparison first, then pairs."""
    if (a.out_shape, a.in_shape) != (b.out_shape, b.in_shape) or a.n_pairs != b.n_pairs:
        return False
    if a.encoding == b.encoding and a.rows == b.rows:
        if a.encoding == "columnar":
            if np.array_equal(a.raw, b.raw):
                return True
        elif all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS):
            return True
    if a.n_pairs > MAX_COMPARE_PAIRS:
        return False
    ra: LineageRelation = a.decompress()
    return bool(ra == b.decompress())


def table_sets_equal(
    a: Mapping[TableKey, LineageTable], b: Mapping[TableKey, LineageTable]
) -> bool:
    """Same relations (keys and contents)."""
    if set(a) != set(b):
        return False
    return all(tables_equal(a[k], b[k]) for k in a)


def only_parts(
    tables: Mapping[TableKey, LineageTable], parts: Sequence[int]
) -> dict[TableKey, LineageTable]:
    """The tables of the relations ``parts`` (see :data:`PARTS`)."""
    return {k: t for k, t in tables.items() if k[0] in parts}


def compress_all(
    relations: Mapping[tuple[int, int], LineageRelation],
    considered: Mapping[tuple[int, int], LineageRelation] | None,
    tables: Mapping[tuple[int, int], LineageTable] | None = None,
    considered_tables: Mapping[tuple[int, int], LineageTable] | None = None,
) -> dict[TableKey, LineageTable]:
    """ProvRC tables of a capture's relations, keyed by :data:`TableKey`.

    A capture's own tables (``tables``, ``considered_tables``: the factorised extraction
    produced them) are taken as they are; only relations without a table are compressed.
    """
    out: dict[TableKey, LineageTable] = {}
    for which, rels, known in ((0, relations, tables), (1, considered, considered_tables)):
        for o, i in rels or {}:  # keys only: a lazy relation is expanded only when needed
            table = None if known is None else known.get((o, i))
            out[(which, o, i)] = compress((rels or {})[(o, i)]) if table is None else table
    return out


def contributing(tables: Mapping[TableKey, LineageTable]) -> dict[tuple[int, int], LineageTable]:
    """``(output, input) -> table`` of the contributing relation."""
    return {(o, i): t for (w, o, i), t in tables.items() if w == 0}


def considered(tables: Mapping[TableKey, LineageTable]) -> dict[tuple[int, int], LineageTable]:
    """``(output, input) -> table`` of the considered relation."""
    return {(o, i): t for (w, o, i), t in tables.items() if w == 1}
