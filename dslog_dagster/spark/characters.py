"""Character-range lineage of a Spark capture, computed on the executors.

The model is :mod:`dslog_dagster.core.characters`: a string column's characters form a
``(row, character)`` space, and an output column cut from an input column gets a ProvRC
table between their character spaces, beside the capture's cell lineage. This module fills it
for a :class:`~dslog_dagster.spark.frame_capture.FrameCapture` made with
``capture_frames(..., characters=True)``:

1. **Term.** For every visible string column of the output, its chain of string functions
   down to the input columns is read from the analyzed plan
   (:mod:`~dslog_dagster.spark.char_terms`), across every step of the capture (``split`` →
   ``explode`` → ``regexp_extract`` → ``groupBy``). A column without one (a UDF, a function
   without a rule, an aggregate's value) keeps whole-cell lineage, with the reason in
   :attr:`~dslog_dagster.core.characters.CharacterLineage.whole_cell`.
2. **Pairs of rows.** The cell lineage already knows which input rows each output row came
   from (the row table of the column's slot). Its ProvRC rows are expanded into ``(output
   row, input row)`` pairs by Spark (``sequence`` + ``explode``), and joined with the output's
   values and the input's values by row id — on the executors; no string reaches the driver.
3. **Candidates.** The term is evaluated on the input row with Spark's own functions
   (``substring``, ``split``, ``regexp_extract``...), each value carrying its *segments*
   ``(output start, input start, length, input column)``: a piece of a string keeps the
   segments under it, shifted (``substring``, ``trim``, a token, a regex group, found with
   ``regexp_instr``), a padded or concatenated string shifts its parts' segments, ``lower`` /
   ``upper`` keep them. Every step checks its own offsets against the values (the piece at the
   computed offset must equal the function's result); a failed check marks the candidate
   *coarse*. An explode gives one candidate per token.
4. **Match.** The candidates whose value equals the output cell's value are the cell's
   sources: one for a projection, the tokens equal to the row's token after an explode, every
   group member's matching token for a grouping key. An output cell with no matching or a
   coarse candidate is linked whole (every character to every character of its input cells)
   and counted in ``coarse_cells``: never a guess.
5. **Compression.** The segments become character pairs ``(row, k) ← (row', k')``, range
   partitioned by output row and compressed per partition by ProvRC inside ``mapInArrow``;
   the driver merges the partitions' small tables. A fixed-width ``substring`` over rows kept
   in place is one ProvRC row whatever the row count.

Characters are Unicode code points, as Spark's ``length`` and ``substring`` count them (not
UTF-8 bytes). A token that occurs twice in one input cell is linked to both occurrences: the
two output rows it makes are the same value from the same input row, so no lineage can tell
them apart.
"""

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dslog_dagster.core.characters import CharacterLineage, CharacterTable
from dslog_dagster.core.combine import merge_tables
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.spark.cell_lineage import SlotPlan, empty_table
from dslog_dagster.spark.char_terms import (
    Concat,
    Explode,
    Item,
    Leaf,
    Lit,
    NoCharacters,
    Split,
    Term,
    TermWalker,
    Unary,
    leaves,
)
from dslog_dagster.spark.frame_capture import FrameInput
from dslog_dagster.spark.plan import ColumnLineage, analyzed, output_ids, quoted
from dslog_dagster.spark.rowid import ROW_ID
from dslog_dagster.spark.state import FrameState

__all__ = ["character_lineage"]

_SEG = "struct<o:int,i:int,n:int,c:int>"
_SEGS = f"array<{_SEG}>"
_BLOB_SCHEMA = "c int, blob binary"


def _no_segs() -> Column:
    return F.array().cast(_SEGS)


def _coarse() -> Column:
    return F.lit(None).cast(_SEGS)


def _seg(o: Column, i: Column, n: Column, c: Column) -> Column:
    return F.struct(
        o.cast("int").alias("o"), i.cast("int").alias("i"), n.cast("int").alias("n"), c.alias("c")
    )


def _cand(v: Column, s: Column) -> Column:
    return F.struct(v.alias("v"), s.alias("s"))


def _sliced(x: Column, nv: Column, st: Column) -> Column:
    """``nv``, the piece of ``x``'s value at offset ``st``: ``x``'s segments under it."""
    k = F.length(nv)

    def cut(g: Column) -> Column:
        lo = F.greatest(g["o"], st)
        return _seg(lo - st, g["i"] + lo - g["o"], F.least(g["o"] + g["n"], st + k) - lo, g["c"])

    segs = F.filter(F.transform(x["s"], cut), lambda g: g["n"] > 0)
    ok = F.substring(x["v"], st + 1, k) == nv
    return _cand(
        nv,
        F.when(nv.isNull(), _no_segs())
        .when(x["s"].isNull() | ~ok, _coarse())
        .otherwise(segs),
    )


def _shifted(x: Column, nv: Column, sh: Column) -> Column:
    """``nv``, which holds ``x``'s value at offset ``sh``: ``x``'s segments moved by it."""
    segs = _moved(x["s"], sh)
    ok = F.substring(nv, sh + 1, F.length(x["v"])) == x["v"]
    return _cand(
        nv,
        F.when(nv.isNull(), _no_segs())
        .when(x["s"].isNull() | ~ok, _coarse())
        .otherwise(segs),
    )


def _padded(x: Column, nv: Column, left: bool) -> Column:
    """``lpad``/``rpad``: longer than the value means padding (shifted by it for ``lpad``);
    shorter means the value cut to the length (its first characters)."""
    n_x = F.length(x["v"])
    grown = F.length(nv) >= n_x
    sh = (F.length(nv) - n_x) if left else F.lit(0)
    a, b = _shifted(x, nv, sh), _sliced(x, nv, F.lit(0))
    return _cand(nv, F.when(grown, a["s"]).otherwise(b["s"]))


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
        nv = F.regexp_extract(v, pattern, idx)
        at = F.regexp_instr(v, F.lit(pattern), F.lit(idx))
        return _sliced(x, nv, at - 1)
    if u.fn in ("lpad", "rpad"):
        n, pad = u.args
        left = u.fn == "lpad"
        nv = F.lpad(v, n, pad) if left else F.rpad(v, n, pad)
        return _padded(x, nv, left)
    msg = f"no character rule for `{u.fn}`"  # pragma: no cover (char_terms makes no other)
    raise NoCharacters(msg)


def _tokens(x: Column, sp: Split) -> Column:
    """The candidates of ``split(x, pattern, limit)``'s tokens, each at the offset the
    delimiters before it (``regexp_extract_all`` of the pattern) put it."""
    toks = F.split(x["v"], sp.pattern, sp.limit)
    delims = F.regexp_extract_all(x["v"], F.lit(f"({sp.pattern})"), F.lit(1))
    lens = F.transform(toks, lambda t, j: F.length(t) + F.coalesce(F.length(F.get(delims, j)), F.lit(0)))

    def one(t: Column, j: Column) -> Column:
        st = F.aggregate(F.slice(lens, F.lit(1), j), F.lit(0), lambda a, b: a + b)
        return _sliced(x, t, st)

    return F.coalesce(F.transform(toks, one), F.array().cast(f"array<struct<v:string,s:{_SEGS}>>"))


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
    parts = []
    for p in term.parts:
        if isinstance(p, Explode):
            msg = "it concatenates an exploded value"
            raise NoCharacters(msg)
        parts.append(F.get(candidates(p, leaf_cols), 0))
    values = [p["v"] for p in parts]
    if term.sep is None:
        nv = F.concat(*values)
        sizes = [F.length(v) for v in values]
    else:
        nv = F.concat_ws(term.sep, *values)
        sizes = [F.when(v.isNull(), 0).otherwise(F.length(v) + len(term.sep)) for v in values]
    moved, off = [], F.lit(0)
    for p, size in zip(parts, sizes, strict=True):
        moved.append(_moved(p["s"], off))
        off = off + size
    return _cand(nv, F.when(nv.isNull(), _no_segs()).otherwise(F.concat(*moved)))


def _moved(segs: Column, shift: Column) -> Column:
    """Segments moved right by ``shift`` output characters (a one-argument lambda: Spark
    reads a two-argument one as (element, index))."""
    return F.transform(segs, lambda g: _seg(g["o"] + shift, g["i"], g["n"], g["c"]))


# ---------------------------------------------------------------------- rows and pairs


def row_pairs(spark: Any, table: LineageTable) -> DataFrame:
    """The ``(o, r)`` pairs of a 1-D row table ``(n_out,) ← (n_in,)``, expanded by Spark
    from its ProvRC rows (a columnar table's pairs are sent as they are)."""
    if table.encoding == "columnar":
        raw = table.raw
        data = pa.table({"o": raw[0].astype(np.int64), "r": raw[1].astype(np.int64)})
        return spark.createDataFrame(data.to_pandas()) if table.rows else spark.createDataFrame([], "o long, r long")
    rows = [
        tuple(int(getattr(table, f)[0, j]) for f in ("out_lo", "out_hi", "in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi"))
        for j in range(table.rows)
    ]
    schema = "olo long, ohi long, ref long, q long, rr long, mult long, lo long, hi long"
    df = spark.createDataFrame(rows, schema).select("*", F.explode(F.sequence("olo", "ohi")).alias("o"))
    f = F.col("mult") * F.floor((F.col("o") + F.col("rr")) / F.col("q")).cast("long")
    lo = F.when(F.col("ref") == -1, F.col("lo")).otherwise(f - F.col("hi"))
    hi = F.when(F.col("ref") == -1, F.col("hi")).otherwise(f - F.col("lo"))
    return df.select("o", F.explode(F.sequence(lo, hi)).alias("r"))


def _compressor(out_shape: tuple[int, int], in_shapes: Mapping[int, tuple[int, int]]) -> Callable[..., Any]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from dslog_dagster.core.compression import compress
        from dslog_dagster.core.relation import LineageRelation

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        t = pa.Table.from_batches(parts)
        cols = {n: t.column(n).to_numpy().astype(np.int64) for n in ("o", "oc", "r", "ic", "c")}
        for c in np.unique(cols["c"]):
            sel = cols["c"] == c
            rel = LineageRelation.from_columns(
                out_shape,
                in_shapes[int(c)],
                [cols["o"][sel], cols["oc"][sel]],
                [cols["r"][sel], cols["ic"][sel]],
            )
            blob = table_to_blob(compress(rel.unique(), threads=1))
            yield pa.RecordBatch.from_arrays(
                [pa.array([int(c)], pa.int32()), pa.array([blob], pa.binary())], names=["c", "blob"]
            )

    return run


def _max_length(df: DataFrame, names: Sequence[str]) -> list[int]:
    row = df.agg(*[F.max(F.length(F.col(quoted(n)))) for n in names]).first()
    return [int(v or 0) for v in (row or [0] * len(names))]


def _all_chars(k: int, col: Column) -> Column:
    """Every character of ``col`` as ``(c, ic)`` structs of leaf ``k``."""
    chars = F.transform(
        F.sequence(F.lit(0), F.length(col) - 1),
        lambda t: F.struct(F.lit(k).alias("c"), t.cast("int").alias("ic")),
    )
    return F.when(F.length(col) > 0, chars).otherwise(F.array().cast("array<struct<c:int,ic:int>>"))


def _pairs(
    joined: DataFrame, term: Term, leaf_cols: Mapping[Leaf, tuple[int, Column]]
) -> tuple[DataFrame, DataFrame]:
    """The character pairs ``(o, oc, r, ic, c)`` of joined ``(o, ov, r, l0, l1...)`` rows,
    and the coarse rows (their output row ``o``)."""
    ov = F.col("ov")
    matches = F.filter(candidates(term, leaf_cols), lambda c: c["v"] == ov)
    coarse = (
        ov.isNotNull()
        & (F.length(ov) > 0)
        & ((F.size(matches) == 0) | F.exists(matches, lambda c: c["s"].isNull()))
    )
    names = [f"l{k}" for k, _ in leaf_cols.values()]
    flagged = joined.select("o", "r", "ov", *names, matches.alias("m"), coarse.alias("coarse"))
    exact = (
        flagged.where(~F.col("coarse"))
        .select("o", "r", F.explode(F.flatten(F.transform("m", lambda c: c["s"]))).alias("g"))
        .where(F.col("g.n") > 0)
        .select("o", "r", "g", F.explode(F.sequence(F.lit(0), F.col("g.n") - 1)).alias("t"))
        .select(
            "o",
            (F.col("g.o") + F.col("t")).alias("oc"),
            "r",
            (F.col("g.i") + F.col("t")).alias("ic"),
            F.col("g.c").alias("c"),
        )
    )
    everything = F.flatten(F.array(*[_all_chars(k, F.col(f"l{k}")) for k, _ in leaf_cols.values()]))
    coarse_rows = flagged.where(F.col("coarse"))
    whole = (
        coarse_rows.select("o", "r", "ov", F.explode(everything).alias("x"))
        .select("o", "r", "x", F.explode(F.sequence(F.lit(0), F.length(ov) - 1)).alias("oc"))
        .select("o", "oc", "r", F.col("x.ic").alias("ic"), F.col("x.c").alias("c"))
    )
    return exact.unionByName(whole), coarse_rows.select("o")


def _compress(
    pairs: DataFrame, out_shape: tuple[int, int], in_shapes: Mapping[int, tuple[int, int]]
) -> dict[int, LineageTable]:
    """Per leaf, the ProvRC table of ``pairs``: range partitioned by output row, compressed
    per partition on the executors, merged at the seams on the driver."""
    parts = pairs.repartitionByRange("o").mapInArrow(_compressor(out_shape, in_shapes), _BLOB_SCHEMA)
    by_leaf: dict[int, list[LineageTable]] = {}
    for row in parts.collect():
        by_leaf.setdefault(int(row["c"]), []).append(table_from_blob(bytes(row["blob"])))
    return {
        k: merge_tables(by_leaf[k]) if k in by_leaf else empty_table(out_shape, shape)
        for k, shape in in_shapes.items()
    }


def row_tables_by_pair(
    plan: SlotPlan, row_table: Mapping[tuple[int, ...], LineageTable]
) -> dict[tuple[str, int, int], LineageTable]:
    """``(input name, output column, input column)`` -> the row table carrying that pair
    (contributing)."""
    out: dict[tuple[str, int, int], LineageTable] = {}
    for (name, which), groups in plan.pairs.items():
        if which != "contrib":
            continue
        for key, jcs in groups:
            for j, c in jcs:
                out[(name, j, c)] = row_table[key]
    return out


def character_lineage(
    state: FrameState,
    inputs: Sequence[FrameInput],
    frames: Sequence[DataFrame],
    output: DataFrame,
    n_out: int,
    row_tables: Mapping[tuple[str, int, int], LineageTable],
) -> CharacterLineage:
    """The character lineage of the capture's output (see the module docstring).

    ``frames`` are the inputs as the capture read them (with ``ROW_ID``), ``output`` the
    output's rows with ``ROW_ID`` (as the pass computed them), ``row_tables`` the row table
    of each contributing (input, output column, input column) pair
    (:func:`row_tables_by_pair`).
    """
    bases = [(analyzed(f), inp.columns) for f, inp in zip(frames, inputs, strict=True)]
    walker = TermWalker(bases)
    plan = analyzed(state.df)
    ids = output_ids(plan)
    types = dict(state.visible_df().dtypes)
    tables: list[CharacterTable] = []
    whole: dict[str, str] = {}
    coarse: dict[str, int] = {}
    for j, p in enumerate(state.user_positions()):
        name = state.columns[j]
        if types.get(name) != "string":
            continue
        if state.all_to_all:
            whole[name] = "the step was recorded all-to-all (flagged)"
            continue
        try:
            term = walker.attribute(plan, ids[p])
            found = _column(term, j, name, inputs, frames, output, n_out, row_tables, state.infos[p])
        except NoCharacters as e:
            whole[name] = str(e)
            continue
        tables += found[0]
        if found[1]:
            coarse[name] = found[1]
    return CharacterLineage(tuple(tables), whole, coarse)


def _column(
    term: Term,
    j: int,
    name: str,
    inputs: Sequence[FrameInput],
    frames: Sequence[DataFrame],
    output: DataFrame,
    n_out: int,
    row_tables: Mapping[tuple[str, int, int], LineageTable],
    info: Any,
) -> tuple[list[CharacterTable], int]:
    """The character tables of output column ``j`` (``name``) made by ``term``, and how
    many of its cells are coarse."""
    assert isinstance(info, ColumnLineage)
    found = leaves(term)
    if not found:
        return [], 0  # only literals: characters from no input
    i = found[0].input
    if any(leaf.input != i for leaf in found):
        msg = "its characters come from two inputs (a join of their rows)"
        raise NoCharacters(msg)
    inp = inputs[i]
    keys = {row_tables.get((inp.name, j, leaf.column)) is not None for leaf in found}
    tabs = [row_tables.get((inp.name, j, leaf.column)) for leaf in found]
    if False in keys or any(t is not tabs[0] for t in tabs):
        msg = "its input columns' rows are carried apart (e.g. by different sides of a join)"
        raise NoCharacters(msg)
    row_table = tabs[0]
    assert row_table is not None
    spark = output.sparkSession
    leaf_cols = {leaf: (k, F.col(f"l{k}")) for k, leaf in enumerate(found)}
    in_names = [inp.columns[leaf.column] for leaf in found]
    in_ext = _max_length(frames[i], in_names)
    (out_ext,) = _max_length(output, [name])
    left = output.select(F.col(ROW_ID).alias("o"), F.col(quoted(name)).alias("ov"))
    right = frames[i].select(
        F.col(ROW_ID).alias("r"), *[F.col(quoted(n)).alias(f"l{k}") for k, n in enumerate(in_names)]
    )
    joined = row_pairs(spark, row_table).join(left, "o").join(right, "r")
    pairs, coarse_rows = _pairs(joined, term, leaf_cols)
    pairs = pairs.persist()
    try:
        shapes = {k: (inp.n_rows, in_ext[k]) for k in range(len(found))}
        per_leaf = _compress(pairs, (n_out, out_ext), shapes)
        n_coarse = coarse_rows.distinct().count()
    finally:
        pairs.unpersist()
    tables = [
        CharacterTable(name, inp.name, in_names[k], per_leaf[k]) for k in range(len(found))
    ]
    return tables, n_coarse
