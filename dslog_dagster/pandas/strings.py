"""``series.str``: pandas string methods on tracked series, with character-range lineage.

Every method runs pandas' own method on the plain series, so values are exactly what plain
pandas computes. Cell lineage: each cell comes from the same row's cell(s) (string methods are
element-wise), so the result keeps the series' cell lineage (``cat`` and ``+`` add their other
parts'). Character lineage (with ``capture_pandas(..., characters=True)``, see
:mod:`~dslog_dagster.pandas.char_segments`) is placed by a rule per method:

* a piece of the string: ``slice``/``[a:b]`` (any step, negative and out-of-range bounds as
  Python's), ``get``/``[i]``, ``strip``/``lstrip``/``rstrip``, a ``split`` token (``get``,
  ``expand=True``, ``explode``), an ``extract``/``extractall`` group: each character ← the
  input character it is;
* the same characters up to case: ``lower``/``upper``/``casefold``/``swapcase``/``title``/
  ``capitalize`` (a mapping that changes the length, e.g. ``'ß'.upper()``, is *coarse*);
* padding and concatenation: ``pad``/``ljust``/``rjust``/``center``/``zfill`` (the sign of
  ``zfill`` stays first), ``cat``, ``+``: each part's characters shifted; fill characters,
  separators, literals and ``na_rep`` ← nothing;
* any other string method: the cell's characters are *coarse* (every character ← every
  character it was computed from) and counted, never guessed.

Offsets come from lengths pandas computes (``str.len`` of the result and of ``lstrip`` /
``rstrip``) and NumPy arithmetic; ``split`` with a literal separator too. A regular
expression forces a per-row Python call: ``extract``/``extractall`` (``re.search`` /
``re.finditer`` for the group spans) and ``split`` by a regex or by whitespace (the token
spans), as pandas itself calls ``re`` per row.
"""

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from dslog_dagster.pandas import char_segments as cs
from dslog_dagster.pandas.char_segments import is_text, lengths
from dslog_dagster.pandas.rows import I64, ranges
from dslog_dagster.pandas.rules import register, rule
from dslog_dagster.pandas.series import TrackedSeries, refuse
from dslog_dagster.pandas.state import ColumnLineage

__all__ = ["TrackedStringMethods", "concat", "token_rows"]

_CASE = ("lower", "upper", "casefold", "swapcase", "title", "capitalize")


def _norm(x: int | None, n: I64, default: I64) -> I64:
    """A slice bound for values of lengths ``n`` (step 1 semantics)."""
    if x is None:
        return default
    return np.maximum(x + n, 0) if x < 0 else np.minimum(x, n)


def token_rows(positions: I64) -> I64:
    """For rows ``positions`` (sorted) of an explode, each new row's token index in its
    source row."""
    p = np.asarray(positions, np.int64)
    return np.arange(p.size, dtype=np.int64) - np.searchsorted(p, p, side="left")


class TrackedStringMethods:
    """``TrackedSeries.str``; see the module docstring."""

    def __init__(self, series: TrackedSeries) -> None:
        self._t = series
        self._s = series.plain
        self._lin = series.lineage
        ctx = series.frame_state.ctx
        self._segs = ctx.segments
        self._slots = ctx.slots
        self._on = self._segs is not None and self._lin.chars is not None

    # ------------------------------------------------------------------ plumbing

    def _out(self, res: Any, chars: int | None) -> TrackedSeries:
        if not isinstance(res, pd.Series) or len(res) != len(self._s):
            refuse("Series.str", "a string method that changed the rows")
        lin = ColumnLineage(self._lin.contrib, self._lin.consid, chars)
        return TrackedSeries(res, lin, self._t.frame_state)

    def _pieces(
        self,
        res: pd.Series,
        prow: I64,
        a: I64,
        b: I64,
        ln: I64,
        *,
        cased: bool = False,
        rough: np.ndarray | None = None,
    ) -> int | None:
        """The result's slot from one piece per entry (row ``prow``), or ``None`` when off."""
        if not self._on or not is_text(res):
            return None
        assert self._segs is not None
        assert self._lin.chars is not None
        nonempty = lengths(res) > 0
        return cs.compose(
            self._segs, self._slots, self._lin.chars, prow, prow, a, b, ln, len(res),
            nonempty[prow], cased=cased, rough_piece=rough,
        )  # fmt: skip

    def _piece(self, res: pd.Series, b: I64, ln: I64, **kw: Any) -> TrackedSeries:
        rows = np.arange(len(res), dtype=np.int64)
        ln = np.where(lengths(res) > 0, np.maximum(ln, 0), 0)
        return self._out(res, self._pieces(res, rows, np.zeros_like(rows), b, ln, **kw))

    def _coarse(self, res: pd.Series) -> int | None:
        if not self._on or not is_text(res):
            return None
        assert self._segs is not None
        assert self._lin.chars is not None
        return cs.made_coarse(self._segs, self._slots, self._lin.chars, lengths(res) > 0)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """A string method without a character rule: cell lineage from the same cell, its
        characters coarse."""
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._s.str, name)

        def run(*args: Any, **kwargs: Any) -> Any:
            if any(isinstance(v, TrackedSeries) for v in (*args, *kwargs.values())):
                refuse(f"Series.str.{name}", "a tracked argument")
            res = method(*args, **kwargs)
            if isinstance(res, pd.DataFrame) and res.index.equals(self._s.index):
                cols = [
                    ColumnLineage(self._lin.contrib, self._lin.consid, self._coarse(res[c]))
                    for c in res.columns
                ]
                return rule("frame")(res, self._t.frame_state.with_columns(cols))
            if not isinstance(res, pd.Series) or not res.index.equals(self._s.index):
                refuse(f"Series.str.{name}", "a result that is not one value per row")
            return self._out(res, self._coarse(res))

        return run

    # ------------------------------------------------------------------ pieces

    def slice(
        self, start: int | None = None, stop: int | None = None, step: int | None = None
    ) -> TrackedSeries:
        res = self._s.str.slice(start, stop, step)
        n = lengths(self._s)
        if step in (None, 1):
            b = _norm(start, n, np.zeros_like(n))
            e = _norm(stop, n, n)
            return self._piece(res, b, e - b)
        assert step is not None
        if step == 0:
            refuse("Series.str.slice", "step 0")
        if step > 0:
            first = _norm(start, n, np.zeros_like(n))
        elif start is None:
            first = n - 1
        else:
            first = np.maximum(start + n, -1) if start < 0 else np.minimum(start, n - 1)
        count = lengths(res)
        rows = np.repeat(np.arange(len(res), dtype=np.int64), count)
        t = ranges(np.zeros(count.size, np.int64), count)
        ones = np.ones(rows.size, np.int64)
        return self._out(res, self._pieces(res, rows, t, first[rows] + t * step, ones))

    def __getitem__(self, key: Any) -> TrackedSeries:
        if isinstance(key, slice):
            return self.slice(key.start, key.stop, key.step)
        if isinstance(key, int):
            return self.get(key)
        refuse("Series.str.__getitem__", "only an integer or a slice")

    def get(self, i: int) -> TrackedSeries:
        """Character ``i`` of a string, or token ``i`` of a ``split``'s list."""
        res = self._s.str.get(i)
        if is_text(self._s):
            n = lengths(self._s)
            at = np.where(i < 0, n + i, i) if isinstance(i, int) else np.full(n.size, -1)
            return self._piece(res, at, np.ones_like(n))
        return self._out(res, self._tokens(i))

    def _tokens(self, i: int) -> int | None:
        """Token ``i`` of every list cell (characters), or ``None`` when off."""
        if not self._on or not isinstance(i, int):
            return None
        assert self._segs is not None
        assert self._lin.chars is not None
        ntok = np.asarray(pd.to_numeric(self._s.str.len(), errors="coerce").fillna(0), np.int64)
        want = np.where(i < 0, ntok + i, i)
        want = np.where((want >= 0) & (want < ntok), want, -1)
        rows = np.arange(len(self._s), dtype=np.int64)
        return cs.select_tokens(self._segs, self._slots, self._lin.chars, rows, want)

    def _stripped(self, res: pd.Series, left: pd.Series | None) -> TrackedSeries:
        n = lengths(self._s)
        b = np.zeros_like(n) if left is None else n - lengths(left)
        return self._piece(res, b, lengths(res))

    def strip(self, to_strip: str | None = None) -> TrackedSeries:
        return self._stripped(self._s.str.strip(to_strip), self._s.str.lstrip(to_strip))

    def lstrip(self, to_strip: str | None = None) -> TrackedSeries:
        res = self._s.str.lstrip(to_strip)
        return self._stripped(res, res)

    def rstrip(self, to_strip: str | None = None) -> TrackedSeries:
        return self._stripped(self._s.str.rstrip(to_strip), None)

    def _case(self, name: str) -> TrackedSeries:
        res = getattr(self._s.str, name)()
        n, m = lengths(self._s), lengths(res)
        return self._piece(res, np.zeros_like(n), n, cased=True, rough=n != m)

    def lower(self) -> TrackedSeries:
        return self._case("lower")

    def upper(self) -> TrackedSeries:
        return self._case("upper")

    def casefold(self) -> TrackedSeries:
        return self._case("casefold")

    def swapcase(self) -> TrackedSeries:
        return self._case("swapcase")

    def title(self) -> TrackedSeries:
        return self._case("title")

    def capitalize(self) -> TrackedSeries:
        return self._case("capitalize")

    # ------------------------------------------------------------------ padding

    def pad(self, width: int, side: str = "left", fillchar: str = " ") -> TrackedSeries:
        res = self._s.str.pad(width, side=side, fillchar=fillchar)
        n = lengths(self._s)
        marg = np.maximum(width - n, 0)
        if side == "left":
            a = marg
        elif side == "right":
            a = np.zeros_like(n)
        else:  # Python's str.center
            a = marg // 2 + (marg & width & 1)
        rows = np.arange(len(res), dtype=np.int64)
        ln = np.where(lengths(res) > 0, n, 0)
        return self._out(res, self._pieces(res, rows, a, np.zeros_like(n), ln))

    def ljust(self, width: int, fillchar: str = " ") -> TrackedSeries:
        return self.pad(width, "right", fillchar)

    def rjust(self, width: int, fillchar: str = " ") -> TrackedSeries:
        return self.pad(width, "left", fillchar)

    def center(self, width: int, fillchar: str = " ") -> TrackedSeries:
        return self.pad(width, "both", fillchar)

    def zfill(self, width: int) -> TrackedSeries:
        """Zeros on the left, after a leading sign (``+``/``-``), as Python's ``zfill``."""
        res = self._s.str.zfill(width)
        n = lengths(self._s)
        live = lengths(res) > 0
        signed = live & np.asarray(self._s.str.slice(0, 1).isin(["+", "-"]), bool) & (n < width)
        rows = np.arange(len(res), dtype=np.int64)
        marg = np.maximum(width - n, 0)
        # piece 1: the sign (signed rows) or the whole value; piece 2: the rest of a signed value
        a1 = np.where(signed, 0, marg)
        ln1 = np.where(signed, 1, np.where(live, n, 0))
        s2 = rows[signed]
        prow = np.concatenate([rows, s2])
        a = np.concatenate([a1, marg[s2] + 1])
        b = np.concatenate([np.zeros_like(n), np.ones(s2.size, np.int64)])
        ln = np.concatenate([ln1, n[s2] - 1])
        return self._out(res, self._pieces(res, prow, a, b, ln))

    # ------------------------------------------------------------------ split

    def split(
        self, pat: Any = None, *, n: int = -1, expand: bool = False, regex: bool | None = None
    ) -> Any:
        """Lists of tokens (or a frame of them with ``expand=True``); each token's characters
        ← their place in the string."""
        lists = self._s.str.split(pat, n=n, expand=False, regex=regex)
        slot = self._split_slot(lists, pat, n, regex)
        if not expand:
            return self._out(lists, slot)
        res = self._s.str.split(pat, n=n, expand=True, regex=regex)
        ntok = np.asarray(pd.to_numeric(lists.str.len(), errors="coerce").fillna(0), np.int64)
        rows = np.arange(len(res), dtype=np.int64)
        cols = []
        for j in range(res.shape[1]):
            chars = None
            if slot is not None:
                assert self._segs is not None
                want = np.where(j < ntok, j, -1)
                chars = cs.select_tokens(self._segs, self._slots, slot, rows, want)
            cols.append(ColumnLineage(self._lin.contrib, self._lin.consid, chars))
        return rule("frame")(res, self._t.frame_state.with_columns(cols))

    def _split_slot(self, lists: pd.Series, pat: Any, n: int, regex: bool | None) -> int | None:
        if not self._on:
            return None
        assert self._segs is not None
        assert self._lin.chars is not None
        literal = isinstance(pat, str) and (regex is False or (regex is None and len(pat) == 1))
        exploded = lists.explode()
        src = np.repeat(np.arange(len(lists), dtype=np.int64), _counts(lists))
        tlen = lengths(exploded)
        tok = token_rows(src)
        rough = np.zeros(src.size, bool)
        if literal:
            csum = np.cumsum(tlen) - tlen
            first = np.searchsorted(src, src, side="left")
            start = csum - csum[first] + tok * len(pat)
        else:  # a regex or whitespace: spans found per row by Python's re (documented)
            start, ok = _token_starts(self._s, lists, pat, n)
            rough = ~ok[src] if src.size else rough
        keep = tlen > 0
        return cs.compose(
            self._segs, self._slots, self._lin.chars, src[keep], src[keep],
            np.zeros(int(keep.sum()), np.int64), start[keep], tlen[keep], len(lists),
            np.ones(int(keep.sum()), bool), tok=tok[keep], rough_piece=rough[keep],
        )  # fmt: skip

    # ------------------------------------------------------------------ regex groups

    def extract(self, pat: str, flags: int = 0, expand: bool = True) -> Any:
        """The groups of the first match; each group's characters ← its span (``re.search``
        per row)."""
        res = self._s.str.extract(pat, flags=flags, expand=expand)
        rx = re.compile(pat, flags)
        spans = _spans(self._s, lambda v: [rx.search(v)], rx.groups, one=True)
        if isinstance(res, pd.Series):
            return self._group(res, spans[0])
        cols = [self._group(res[c], spans[g]).lineage for g, c in enumerate(res.columns)]
        return rule("frame")(res, self._t.frame_state.with_columns(cols))

    def _group(self, res: pd.Series, span: tuple[I64, I64, I64]) -> TrackedSeries:
        prow, b, e = span
        if not np.array_equal(prow, np.arange(len(res), dtype=np.int64)):
            refuse("Series.str.extract", "matches dslog cannot line up with pandas' rows")
        return self._piece(res, b, e - b)

    def extractall(self, pat: str, flags: int = 0) -> Any:
        """One row per match (``re.finditer`` per row); each row from the string's row."""
        res = self._s.str.extractall(pat, flags=flags)
        rx = re.compile(pat, flags)
        spans = _spans(self._s, lambda v: list(rx.finditer(v)), rx.groups, one=False)
        src = spans[0][0] if spans else np.zeros(0, np.int64)
        if len(res) != src.size:
            refuse("Series.str.extractall", "matches dslog cannot line up with pandas' rows")
        st = self._t.frame_state
        moved = st.with_columns([self._lin.cells()]).rows_taken(src)
        base = moved.columns[0]
        rows = np.arange(src.size, dtype=np.int64)
        cols = []
        for g, c in enumerate(res.columns):
            chars = None
            if self._on and is_text(res[c]):
                assert self._segs is not None
                assert self._lin.chars is not None
                prow, b, e = spans[g]
                chars = cs.compose(
                    self._segs, self._slots, self._lin.chars, prow, rows, np.zeros_like(b), b,
                    np.maximum(e - b, 0), src.size, lengths(res[c]) > 0,
                )  # fmt: skip
            cols.append(ColumnLineage(base.contrib, base.consid, chars))
        return rule("frame")(res, moved.with_columns(cols))

    # ------------------------------------------------------------------ concatenation

    def cat(
        self, others: Any = None, sep: str | None = None, na_rep: str | None = None, **kw: Any
    ) -> TrackedSeries:
        """``cat`` with tracked series of the same rows (a list, or one series)."""
        if others is None:
            refuse("Series.str.cat", "joining a whole column into one string (a reduction)")
        if kw:
            refuse("Series.str.cat", f"options {sorted(kw)}")
        parts = list(others) if isinstance(others, list | tuple) else [others]
        for p in parts:
            if not isinstance(p, TrackedSeries):
                refuse("Series.str.cat", "untracked or non-series parts")
        res = self._s.str.cat([p.plain for p in parts], sep=sep, na_rep=na_rep)
        return concat([self._t, *parts], res, sep or "", na_rep)


def concat(parts: list[Any], res: pd.Series, sep: str, na_rep: str | None) -> TrackedSeries:
    """The concatenation ``res`` of ``parts`` (tracked series of one row space, or ``str``
    literals) with ``sep`` between them: cell lineage of every tracked part, characters of
    each part shifted by what precedes it."""
    first = next(p for p in parts if isinstance(p, TrackedSeries))
    plain = all(isinstance(p, TrackedSeries | str) for p in parts)
    st = first.frame_state
    lin = ColumnLineage()
    for p in parts:
        if isinstance(p, TrackedSeries):
            if p.frame_state.space is not st.space:
                refuse("string concatenation", "parts from frames with other rows")
            lin = lin.union(p.lineage)
    segs = st.ctx.segments
    n = len(res)
    known = all(
        not isinstance(p, TrackedSeries) or p.lineage.chars is not None or not p.lineage.contrib
        for p in parts
    )
    if segs is None or not known or not plain or not is_text(res):
        return TrackedSeries(res, lin, st)
    live = lengths(res) > 0
    rows = np.arange(n, dtype=np.int64)
    at = np.zeros(n, np.int64)
    chars: int | None = None
    for k, p in enumerate(parts):
        if isinstance(p, TrackedSeries):
            size = lengths(p.plain)
            null = np.asarray(p.plain.isna().to_numpy(), bool)
            if na_rep is not None:
                size = np.where(null, len(na_rep), size)
            if p.lineage.chars is not None:
                ln = np.where(live & ~null, lengths(p.plain), 0)
                slot = cs.compose(
                    segs, st.ctx.slots, p.lineage.chars, rows, rows, at, np.zeros(n, np.int64),
                    ln, n, live,
                )  # fmt: skip
                chars = slot if chars is None else cs.union(st.ctx.slots, chars, slot)
        else:
            size = np.full(n, len(str(p)), np.int64)
        at = at + size + (len(sep) if k < len(parts) - 1 else 0)
    if chars is None:  # literals only: characters from nothing
        chars = _empty_slot(st)
    return TrackedSeries(res, ColumnLineage(lin.contrib, lin.consid, chars), st)


def _empty_slot(st: Any) -> int:
    from dslog_dagster.pandas.rows import RowMap

    none = np.zeros(0, np.int64)
    sid = len(st.ctx.slots)
    st.ctx.slots[sid] = (-1, RowMap.from_pairs(none, none, st.n_rows, cs.SPACE))
    return sid


def _counts(lists: pd.Series) -> I64:
    """Entries per list cell as ``explode`` makes rows: one for a null or an empty list."""
    got = np.asarray(pd.to_numeric(lists.str.len(), errors="coerce").fillna(0), np.int64)
    return np.maximum(got, 1)


def _token_starts(values: pd.Series, lists: pd.Series, pat: Any, n: int) -> tuple[I64, np.ndarray]:
    """Per token (in ``explode`` order) its start, and per row whether the tokens were found
    in order (a pattern with groups puts them in the list: those rows are coarse)."""
    starts: list[int] = []
    ok = np.ones(len(values), bool)
    rx = None if pat is None else (pat if isinstance(pat, re.Pattern) else re.compile(pat))
    for r, (v, toks) in enumerate(
        zip(values.to_numpy(object), lists.to_numpy(object), strict=True)
    ):
        if not isinstance(toks, list) or not toks:
            starts.append(0)
            continue
        spans: list[int] = []
        if rx is None:  # whitespace: tokens are found in order after the previous one
            at = 0
            for t in toks:
                at = v.find(t, at)
                spans.append(at)
                at += len(t)
        else:
            at = 0
            for k, m in enumerate(rx.finditer(v)):
                if 0 < n <= k:
                    break
                spans.append(at)
                at = m.end()
            spans.append(at)
        if len(spans) != len(toks) or any(
            s < 0 or v[s : s + len(t)] != t for s, t in zip(spans, toks, strict=False)
        ):
            ok[r] = False
            spans = [0] * len(toks)
        starts.extend(spans)
    return np.asarray(starts, np.int64), ok


def _spans(
    values: pd.Series, matches: Callable[[str], list[Any]], groups: int, *, one: bool
) -> list[tuple[I64, I64, I64]]:
    """Per group ``(source row, start, end)`` of every match (a group that did not take part,
    or a row without a match when ``one``, has ``start == end``); ``one``: exactly one entry
    per row (``extract``), else one per match (``extractall``)."""
    rows: list[int] = []
    bounds: list[list[tuple[int, int]]] = [[] for _ in range(groups)]
    for r, v in enumerate(values.to_numpy(object)):
        found = matches(v) if isinstance(v, str) else [None]
        if not one:
            found = [m for m in found if m is not None]
        for m in found[:1] if one else found:
            rows.append(r)
            for g in range(groups):
                sp = m.span(g + 1) if m is not None else (-1, -1)
                bounds[g].append((sp[0], sp[1]) if sp[0] >= 0 else (0, 0))
    src = np.asarray(rows, np.int64)
    out = []
    for g in range(groups):
        arr = np.asarray(bounds[g], np.int64).reshape(-1, 2)
        out.append((src, arr[:, 0], arr[:, 1]))
    return out


register("strings", TrackedStringMethods)
register("str_concat", concat)
