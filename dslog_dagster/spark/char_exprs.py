"""The Spark expressions that place a string function's result in its argument.

A *candidate* is a struct ``(v, s)``: a string value and its *segments*, an array of
``(o, i, n, c)`` structs saying that characters ``o .. o+n-1`` of ``v`` are characters
``i .. i+n-1`` of the input column numbered ``c`` (a table key of
:mod:`~dslog_dagster.spark.characters`). :func:`candidates` turns a
:mod:`~dslog_dagster.spark.char_terms` term into an array of candidates computed row by row by
Spark itself: each function's value is Spark's own function, and its offset in its argument
comes from Spark functions too (``length``, ``ltrim``, ``regexp_instr``, the lengths of the
tokens and of the delimiters ``regexp_extract_all`` finds). Every step checks its offset
against the values (the piece at the offset must equal the result); when the check fails the
candidate's segments are null: *coarse*, to be linked whole, never guessed. ``explode`` gives
one candidate per token; every other term one.
"""

from collections.abc import Callable, Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F

from dslog_dagster.spark.char_terms import (
    Concat,
    Explode,
    Item,
    Leaf,
    Lit,
    NoCharacters,
    Split,
    Term,
    Unary,
)

__all__ = ["SEGS", "candidates"]

_SEG = "struct<o:int,i:int,n:int,c:int>"
SEGS = f"array<{_SEG}>"


def _no_segs() -> Column:
    return F.array().cast(SEGS)


def _coarse() -> Column:
    return F.lit(None).cast(SEGS)


def _seg(o: Column, i: Column, n: Column, c: Column) -> Column:
    return F.struct(
        o.cast("int").alias("o"), i.cast("int").alias("i"), n.cast("int").alias("n"), c.alias("c")
    )


def _cand(v: Column, s: Column) -> Column:
    return F.struct(v.alias("v"), s.alias("s"))


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """``body(value)`` with ``value`` computed once: bound to a lambda variable (Spark would
    otherwise copy the expression into every place ``body`` uses it, and a chain of string
    functions would grow exponentially)."""
    return F.get(F.transform(F.array(value), body), 0)


def _sliced(x: Column, nv: Column, st: Column) -> Column:
    """``nv``, the piece of ``x``'s value at offset ``st``: ``x``'s segments under it."""

    def body(b: Column) -> Column:
        nv, st = b["nv"], b["st"]
        k = F.length(nv)

        def cut(g: Column) -> Column:
            lo = F.greatest(g["o"], st)
            n = F.least(g["o"] + g["n"], st + k) - lo
            return _seg(lo - st, g["i"] + lo - g["o"], n, g["c"])

        segs = F.filter(F.transform(x["s"], cut), lambda g: g["n"] > 0)
        ok = F.substring(x["v"], st + 1, k) == nv
        bad = x["s"].isNull() | ~ok
        return _cand(nv, F.when(nv.isNull(), _no_segs()).when(bad, _coarse()).otherwise(segs))

    return _let(F.struct(nv.alias("nv"), st.cast("int").alias("st")), body)


def _shifted(x: Column, nv: Column, sh: Column) -> Column:
    """``nv``, which holds ``x``'s value at offset ``sh``: ``x``'s segments moved by it."""
    segs = _moved(x["s"], sh)
    ok = F.substring(nv, sh + 1, F.length(x["v"])) == x["v"]
    bad = x["s"].isNull() | ~ok
    return _cand(nv, F.when(nv.isNull(), _no_segs()).when(bad, _coarse()).otherwise(segs))


def _padded(x: Column, nv: Column, left: bool) -> Column:
    """``lpad``/``rpad``: longer than the value means padding (shifted by it for ``lpad``);
    shorter means the value cut to the length (its first characters)."""

    def body(nv: Column) -> Column:
        n_x = F.length(x["v"])
        grown = F.length(nv) >= n_x
        sh = (F.length(nv) - n_x) if left else F.lit(0)
        a, b = _shifted(x, nv, sh), _sliced(x, nv, F.lit(0))
        return _cand(nv, F.when(grown, a["s"]).otherwise(b["s"]))

    return _let(nv, body)


def _unary(u: Unary, x: Column) -> Column:
    """The candidate of ``u`` applied to candidate ``x``.

    Why one function: one short branch per string function, each Spark's own function plus
    the offset of its result in its argument.
    """
    v = x["v"]
    n_v = F.length(v)
    if u.fn == "substring":
        pos, n = u.args
        nv = F.substring(v, pos, n)
        start = F.lit(pos - 1) if pos > 0 else (n_v + pos if pos < 0 else F.lit(0))
        return _sliced(x, nv, F.greatest(start, F.lit(0)))
    if u.fn == "left":
        return _sliced(x, F.left(v, F.lit(u.args[0])), F.lit(0))
    if u.fn == "right":
        nv = F.right(v, F.lit(u.args[0]))
        return _sliced(x, nv, n_v - F.length(nv))
    if u.fn == "trim":
        return _sliced(x, F.trim(v), n_v - F.length(F.ltrim(v)))
    if u.fn == "ltrim":
        nv = F.ltrim(v)
        return _sliced(x, nv, n_v - F.length(nv))
    if u.fn == "rtrim":
        return _sliced(x, F.rtrim(v), F.lit(0))
    if u.fn in ("lower", "upper"):
        nv = F.lower(v) if u.fn == "lower" else F.upper(v)
        # a case mapping that changes the length (e.g. 'İ' -> 'i̇') cannot be placed
        return _cand(nv, F.when(F.length(nv) == n_v, x["s"]).otherwise(_coarse()))
    if u.fn == "regexp_extract":
        pattern, idx = u.args
        return _group(x, pattern, idx)
    if u.fn in ("lpad", "rpad"):
        n, pad = u.args
        left = u.fn == "lpad"
        nv = F.lpad(v, n, pad) if left else F.rpad(v, n, pad)
        return _padded(x, nv, left)
    msg = f"no character rule for `{u.fn}`"  # pragma: no cover (char_terms makes no other)
    raise NoCharacters(msg)


def _group(x: Column, pattern: str, idx: int) -> Column:
    """``regexp_extract(x, pattern, idx)``: Spark's ``regexp_instr`` gives where the whole
    match starts (it ignores the group index), and the group is placed inside the match where
    its value occurs; a group value that occurs twice in the match cannot be placed (coarse).
    """
    v = x["v"]
    nv = F.regexp_extract(v, pattern, idx)
    if idx == 0:
        return _sliced(x, nv, F.regexp_instr(v, F.lit(pattern)) - 1)

    def body(b: Column) -> Column:
        nv, whole, at = b["nv"], b["w"], b["at"]
        first = F.call_function("locate", nv, whole)
        again = F.call_function("locate", nv, whole, first + 1)
        placed = _sliced(x, nv, at - 1 + first - 1)
        unique = (F.length(nv) == 0) | (again == 0)
        return _cand(nv, F.when(unique, placed["s"]).otherwise(_coarse()))

    bound = F.struct(
        nv.alias("nv"),
        F.regexp_extract(v, pattern, 0).alias("w"),
        F.regexp_instr(v, F.lit(pattern)).alias("at"),
    )
    return _let(bound, body)


def _tokens(x: Column, sp: Split) -> Column:
    """The candidates of ``split(x, pattern, limit)``'s tokens, each at the offset the
    delimiters before it (``regexp_extract_all`` of the pattern) put it."""
    toks = F.split(x["v"], sp.pattern, sp.limit)
    delims = F.regexp_extract_all(x["v"], F.lit(f"({sp.pattern})"), F.lit(1))

    def body(b: Column) -> Column:
        toks, delims = b["t"], b["d"]
        lens = F.transform(
            toks, lambda t, j: F.length(t) + F.coalesce(F.length(F.get(delims, j)), F.lit(0))
        )

        def one(t: Column, j: Column) -> Column:
            st = F.aggregate(F.slice(lens, F.lit(1), j), F.lit(0), lambda a, c: a + c)
            return _sliced(x, t, st)

        return F.transform(toks, one)

    got = _let(F.struct(toks.alias("t"), delims.alias("d")), body)
    return F.coalesce(got, F.array().cast(f"array<struct<v:string,s:{SEGS}>>"))


def candidates(term: Term, leaf_cols: Mapping[Leaf, tuple[int, Column]]) -> Column:
    """The array of candidates (value, segments) ``term`` gives on one input row, whose
    leaves are ``leaf_cols`` (leaf -> (index, column))."""
    if isinstance(term, Leaf):
        k, col = leaf_cols[term]
        segs = F.when(col.isNull(), _no_segs()).otherwise(
            F.array(_seg(F.lit(0), F.lit(0), F.length(col), F.lit(k)))
        )
        return F.array(_cand(col, segs))
    if isinstance(term, Lit):
        return F.array(_cand(F.lit(term.value).cast("string"), _no_segs()))
    if isinstance(term, Unary):
        return F.transform(candidates(term.child, leaf_cols), lambda x: _unary(term, x))
    if isinstance(term, Item):
        inner = candidates(term.split.child, leaf_cols)
        return F.transform(inner, lambda x: F.get(_tokens(x, term.split), term.index))
    if isinstance(term, Explode):
        inner = candidates(term.split.child, leaf_cols)
        return F.flatten(F.transform(inner, lambda x: _tokens(x, term.split)))
    return F.array(_concat(term, leaf_cols))


def _concat(term: Concat, leaf_cols: Mapping[Leaf, tuple[int, Column]]) -> Column:
    """``concat``/``concat_ws`` of single-valued parts: each part's segments moved by the
    characters before it (``concat_ws`` skips null parts and their separators)."""
    bound = []
    for k, p in enumerate(term.parts):
        if isinstance(p, Explode):
            msg = "it concatenates an exploded value"
            raise NoCharacters(msg)
        bound.append(F.get(candidates(p, leaf_cols), 0).alias(f"p{k}"))

    def body(b: Column) -> Column:
        parts = [b[f"p{k}"] for k in range(len(bound))]
        values = [p["v"] for p in parts]
        if term.sep is None:
            nv = F.concat(*values)
            sizes = [F.length(v) for v in values]
        else:
            sep = len(term.sep)
            nv = F.concat_ws(term.sep, *values)
            sizes = [F.when(v.isNull(), 0).otherwise(F.length(v) + sep) for v in values]
        moved, off = [], F.lit(0)
        for p, size in zip(parts, sizes, strict=True):
            moved.append(_moved(p["s"], off))
            off = off + size
        return _cand(nv, F.when(nv.isNull(), _no_segs()).otherwise(F.concat(*moved)))

    return _let(F.struct(*bound), body)


def _moved(segs: Column, shift: Column) -> Column:
    """Segments moved right by ``shift`` output characters (a one-argument lambda: Spark
    reads a two-argument one as (element, index))."""
    return F.transform(segs, lambda g: _seg(g["o"] + shift, g["i"], g["n"], g["c"]))
