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
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from dslog_dagster.core.characters import CharacterLineage, CharacterTable
from dslog_dagster.core.combine import merge_tables
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.spark.cell_lineage import SlotPlan, empty_table
from dslog_dagster.spark.char_exprs import candidates
from dslog_dagster.spark.char_terms import Leaf, NoCharacters, Term, TermWalker, leaves
from dslog_dagster.spark.frame_capture import FrameInput
from dslog_dagster.spark.plan import analyzed, output_ids, quoted
from dslog_dagster.spark.rowid import ROW_ID
from dslog_dagster.spark.state import FrameState

__all__ = ["character_lineage", "row_pairs", "row_tables_by_pair"]

_BLOB_SCHEMA = "k int, blob binary, n long"
_PROVRC = ("out_lo", "out_hi", "in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")


def row_pairs(spark: SparkSession, table: LineageTable) -> DataFrame:
    """The ``(o, r)`` pairs of a 1-D row table ``(n_out,) ← (n_in,)``, expanded by Spark
    from its ProvRC rows (a columnar table's pairs are sent as they are)."""
    if table.encoding == "columnar":
        rows = [(int(o), int(r)) for o, r in zip(table.raw[0], table.raw[1], strict=True)]
        return spark.createDataFrame(rows, "o long, r long")
    fields = [tuple(int(getattr(table, f)[0, j]) for f in _PROVRC) for j in range(table.rows)]
    schema = "olo long, ohi long, ref long, q long, rr long, mult long, lo long, hi long"
    df = spark.createDataFrame(fields, schema)
    df = df.select("*", F.explode(F.sequence("olo", "ohi")).alias("o"))
    f = F.col("mult") * F.floor((F.col("o") + F.col("rr")) / F.col("q")).cast("long")
    lo = F.when(F.col("ref") == -1, F.col("lo")).otherwise(f - F.col("hi"))
    hi = F.when(F.col("ref") == -1, F.col("hi")).otherwise(f - F.col("lo"))
    return df.select("o", F.explode(F.sequence(lo, hi)).alias("r"))


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


@dataclass
class _Column:
    """One output column with a term: its name, position, term, input and row table, and
    the table key of each of its leaves (``keys[k]`` for ``leaves[k]``)."""

    name: str
    j: int
    term: Term
    input: int
    leaves: list[Leaf]
    rows: LineageTable
    keys: list[int]


def _all_chars(k: int, col: Column) -> Column:
    """Every character of ``col`` as ``(c, ic)`` structs of table key ``k``."""
    chars = F.transform(
        F.sequence(F.lit(0), F.length(col) - 1),
        lambda t: F.struct(F.lit(k).alias("c"), t.cast("int").alias("ic")),
    )
    empty = F.array().cast("array<struct<c:int,ic:int>>")
    return F.when(F.length(col) > 0, chars).otherwise(empty)


def _seg_pairs(g: Column) -> Column:
    """The ``(k, oc, ic)`` character pairs of one segment ``(o, i, n, c)``."""
    return F.transform(
        F.sequence(F.lit(0), g["n"] - 1),
        lambda t: F.struct(
            g["c"].alias("k"),
            (g["o"] + t).cast("long").alias("oc"),
            (g["i"] + t).cast("long").alias("ic"),
        ),
    )


def _column_pairs(col: _Column, leaf_names: Mapping[Leaf, str]) -> Column:
    """Column ``col``'s ``(k, oc, ic)`` pairs on one joined row, from its ``ov<j>`` (the output
    value) and ``m<j>`` (the matching candidates): the matched segments' characters, or, for a
    coarse cell, every output character to every character of the leaves plus one marker
    ``(-1 - j, 0, 0)``."""
    ov, m = F.col(f"ov{col.j}"), F.col(f"m{col.j}")
    coarse = (
        ov.isNotNull()
        & (F.length(ov) > 0)
        & ((F.size(m) == 0) | F.exists(m, lambda c: c["s"].isNull()))
    )
    segs = F.filter(F.flatten(F.transform(m, lambda c: c["s"])), lambda g: g["n"] > 0)
    exact = F.flatten(F.transform(segs, _seg_pairs))
    every = F.flatten(
        F.array(
            *[
                _all_chars(k, F.col(leaf_names[x]))
                for x, k in zip(col.leaves, col.keys, strict=True)
            ]
        )
    )
    whole = F.flatten(
        F.transform(
            every,
            lambda x: F.transform(
                F.sequence(F.lit(0), F.length(ov) - 1),
                lambda t: F.struct(
                    x["c"].alias("k"), t.cast("long").alias("oc"), x["ic"].cast("long").alias("ic")
                ),
            ),
        )
    )
    zero = F.lit(0).cast("long")
    mark = F.array(F.struct(F.lit(-1 - col.j).alias("k"), zero.alias("oc"), zero.alias("ic")))
    return F.when(coarse, F.concat(whole, mark)).otherwise(exact)


def _matching(j: int) -> Column:
    """``m<j>``: the candidates ``cs<j>`` whose value equals the output value ``ov<j>``."""
    ov = F.col(f"ov{j}")
    return F.filter(f"cs{j}", lambda x: x["v"] == ov).alias(f"m{j}")


def _pairs(
    joined: DataFrame, members: Sequence[_Column], leaf_names: Mapping[Leaf, str]
) -> DataFrame:
    """Every member column's character pairs ``(k, o, oc, r, ic)`` from the joined ``(o,
    ov<j>..., r, <leaf columns>)`` rows, in one projection and one explode (no union: each
    row's candidates are computed once for all columns), plus one marker ``(-1 - j, o, 0, r,
    0)`` per coarse pair of rows."""
    leaf_cols = [F.col(n) for n in sorted(set(leaf_names.values()))]
    ovs = [F.col(f"ov{c.j}") for c in members]
    # three selects: each value is computed once (Spark does not merge a projection into the
    # next when that would copy an expensive expression)
    cands = joined.select(
        "o",
        "r",
        *ovs,
        *leaf_cols,
        *[
            candidates(
                c.term,
                {x: (k, F.col(leaf_names[x])) for x, k in zip(c.leaves, c.keys, strict=True)},
            ).alias(f"cs{c.j}")
            for c in members
        ],
    )
    matched = cands.select(
        "o",
        "r",
        *ovs,
        *leaf_cols,
        *[_matching(c.j) for c in members],
    )
    every = F.concat(*[_column_pairs(c, leaf_names) for c in members])
    return matched.select("o", "r", F.explode(every).alias("p")).select(
        F.col("p.k").cast("int").alias("k"),
        F.col("o").cast("long"),
        F.col("p.oc").alias("oc"),
        F.col("r").cast("long"),
        F.col("p.ic").alias("ic"),
    )


def _compressor(
    shapes: Mapping[int, tuple[tuple[int, int], tuple[int, int]]],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Per partition: one ProvRC table per table key, and per coarse marker key the count
    of distinct output rows marked."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from dslog_dagster.core.compression import compress
        from dslog_dagster.core.relation import LineageRelation

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        t = pa.Table.from_batches(parts)
        cols = {n: t.column(n).to_numpy().astype(np.int64) for n in ("k", "o", "oc", "r", "ic")}
        for k in np.unique(cols["k"]):
            sel = cols["k"] == k
            blob, n = None, 0
            if k < 0:
                n = len(np.unique(cols["o"][sel]))
            else:
                out_shape, in_shape = shapes[int(k)]
                rel = LineageRelation.from_columns(
                    out_shape,
                    in_shape,
                    [cols["o"][sel], cols["oc"][sel]],
                    [cols["r"][sel], cols["ic"][sel]],
                )
                blob = table_to_blob(compress(rel.unique(), threads=1))
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([int(k)], pa.int32()),
                    pa.array([blob], pa.binary()),
                    pa.array([n], pa.int64()),
                ],
                names=["k", "blob", "n"],
            )

    return run


def _extents(df: DataFrame, names: Sequence[str]) -> dict[str, int]:
    """The longest value of each column, in characters (one job)."""
    if not names:
        return {}
    row = df.agg(*[F.max(F.length(F.col(quoted(n)))) for n in names]).first()
    assert row is not None
    return {n: int(v or 0) for n, v in zip(names, row, strict=True)}


def _terms(
    state: FrameState,
    inputs: Sequence[FrameInput],
    frames: Sequence[DataFrame],
    row_tables: Mapping[tuple[str, int, int], LineageTable],
    out_columns: Sequence[str] | None = None,
) -> tuple[list[_Column], dict[str, str]]:
    """The output's string columns with a term (table keys numbered in order), and the
    others with the reason they keep whole-cell lineage."""
    walker = TermWalker([(analyzed(f), inp.columns) for f, inp in zip(frames, inputs, strict=True)])
    plan = analyzed(state.df)
    ids = output_ids(plan)
    types = dict(state.visible_df().dtypes)
    cols: list[_Column] = []
    whole: dict[str, str] = {}
    key = 0
    for j, p in enumerate(state.user_positions()):
        name = state.columns[j]
        if types.get(name) != "string":
            continue
        if state.all_to_all:
            whole[name] = "the step was recorded all-to-all (flagged)"
            continue
        try:
            term = walker.attribute(plan, ids[p])
            found = leaves(term)
            if not found:
                continue  # only literals: characters from no input
            i = found[0].input
            if any(leaf.input != i for leaf in found):
                msg = "its characters come from two inputs (a join of their rows)"
                raise NoCharacters(msg)
            jj = j if out_columns is None else list(out_columns).index(name)
            tabs = [row_tables.get((inputs[i].name, jj, leaf.column)) for leaf in found]
            rows = tabs[0]
            if rows is None or any(t is not rows for t in tabs):
                msg = "its input columns' rows are carried apart (e.g. by two sides of a join)"
                raise NoCharacters(msg)
        except NoCharacters as e:
            whole[name] = str(e)
            continue
        cols.append(_Column(name, j, term, i, found, rows, list(range(key, key + len(found)))))
        key += len(found)
    return cols, whole


def character_lineage(
    state: FrameState,
    inputs: Sequence[FrameInput],
    frames: Sequence[DataFrame],
    output: DataFrame,
    n_out: int,
    row_tables: Mapping[tuple[str, int, int], LineageTable],
    out_columns: Sequence[str] | None = None,
) -> CharacterLineage:
    """The character lineage of the capture's output (see the module docstring).

    ``out_columns``: the output's lineage columns, which ``row_tables`` index (a struct's
    leaf fields are columns of their own, :mod:`~dslog_dagster.spark.fields`); default: the
    user's columns.

    ``frames`` are the inputs as the capture read them (with ``ROW_ID``), ``output`` the
    output's rows with ``ROW_ID`` (as the pass computed them), ``row_tables`` the row table
    of each contributing (input, output column, input column) pair
    (:func:`row_tables_by_pair`). Spark jobs: one for the extents of the output, one per
    input read, and one computing and compressing every column's pairs.
    """
    cols, whole = _terms(state, inputs, frames, row_tables, out_columns)
    if not cols:
        return CharacterLineage((), whole, {})
    spark = output.sparkSession
    out_ext = _extents(output, [c.name for c in cols])
    in_ext: dict[tuple[int, int], int] = {}
    for i in sorted({c.input for c in cols}):
        used = sorted({leaf.column for c in cols if c.input == i for leaf in c.leaves})
        got = _extents(frames[i], [inputs[i].columns[u] for u in used])
        in_ext.update({(i, u): got[inputs[i].columns[u]] for u in used})
    shapes: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {}
    for c in cols:
        for leaf, k in zip(c.leaves, c.keys, strict=True):
            in_shape = (inputs[c.input].n_rows, in_ext[(c.input, leaf.column)])
            shapes[k] = ((n_out, out_ext[c.name]), in_shape)
    # one join per (input, row table): the columns of a projection share it
    groups: dict[tuple[int, int], list[_Column]] = {}
    for c in cols:
        groups.setdefault((c.input, id(c.rows)), []).append(c)
    pieces = []
    for (i, _), members in groups.items():
        used = sorted({leaf.column for c in members for leaf in c.leaves})
        leaf_names = {leaf: f"l{leaf.column}" for c in members for leaf in c.leaves}
        left = output.select(
            F.col(ROW_ID).alias("o"), *[F.col(quoted(c.name)).alias(f"ov{c.j}") for c in members]
        )
        right = frames[i].select(
            F.col(ROW_ID).alias("r"),
            *[F.col(quoted(inputs[i].columns[u])).alias(f"l{u}") for u in used],
        )
        joined = row_pairs(spark, members[0].rows).join(left, "o").join(right, "r")
        pieces.append(_pairs(joined, members, leaf_names))
    everything = pieces[0]
    for p in pieces[1:]:
        everything = everything.unionByName(p)
    blobs = (
        everything.repartitionByRange("o").mapInArrow(_compressor(shapes), _BLOB_SCHEMA).collect()
    )
    found: dict[int, list[LineageTable]] = {}
    coarse_rows: dict[int, int] = {}
    for row in blobs:
        k = int(row["k"])
        if k < 0:
            coarse_rows[-1 - k] = coarse_rows.get(-1 - k, 0) + int(row["n"])
        else:
            found.setdefault(k, []).append(table_from_blob(bytes(row["blob"])))
    tables = []
    for c in cols:
        inp = inputs[c.input]
        for leaf, k in zip(c.leaves, c.keys, strict=True):
            t = merge_tables(found[k]) if k in found else empty_table(*shapes[k])
            tables.append(CharacterTable(c.name, inp.name, inp.columns[leaf.column], t))
    coarse = {c.name: coarse_rows[c.j] for c in cols if coarse_rows.get(c.j)}
    return CharacterLineage(tuple(tables), whole, coarse)
