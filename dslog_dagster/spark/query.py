"""Lineage queries that run on Spark, for stores too big for one machine.

Same answers as :meth:`DSLog.prov_query <dslog_dagster.core.api.DSLog.prov_query>` (the
native in-situ path), computed differently:

1. the path is resolved on the driver from the store's records (small);
2. each hop's compressed table is read through the store (so a compaction that packs its
   segment meanwhile cannot break the query), shipped to an executor and decoded there into
   one Spark row per ProvRC row (absolute output intervals, input
   constraints, exact input hulls); columnar tables become one-pair rows, as in
   :func:`dslog_dagster.core.query.prepare`;
3. the θ-join and de-relativisation run per partition of the table's rows with the native
   kernel. Up to :data:`BOXES_INLINE` query boxes travel with the task (one Spark job per
   hop, no exchange): each partition joins all of them against its rows. More boxes go
   through a Spark SQL range join first (a query box meets a table row when their intervals
   intersect on every output attribute (backward) or every input hull (forward)), so that a
   partition only sees the boxes that meet its rows. Either way a partition holding boxes
   ``B`` and rows ``R`` returns the cells of all ``B × R`` pairs; every such pair is a pair of
   the full join (a pair that does not intersect yields nothing), and every intersecting pair
   lands in some partition, so the union over partitions is exactly the hop's answer, splits
   of diagonals and pooling gaps included;
4. the boxes are normalised (on the driver, they are the query's answer) before the next hop.

Select it with ``engine="spark"`` in :func:`run_query`.
"""

from collections.abc import Iterator, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster.core.api import DSLog, Hop
from dslog_dagster.core.query import CellSet, Direction, QueryEngine, as_cells, check_engine
from dslog_dagster.errors import QueryError
from dslog_dagster.spark.session import check_workers

__all__ = ["Engine", "SparkQueryEngine", "run_query", "spark_engine"]

Engine: TypeAlias = QueryEngine

_FIELDS = ("in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")
_ROWS_PER_PARTITION = 50_000
BOXES_INLINE = 100_000
"""Query boxes shipped inside each hop's task (16 bytes per box and axis: 3.2 MB for 2-D
boxes at this bound). A hop with more boxes joins them to the table's rows in Spark SQL first,
which costs a broadcast job per hop but sends each partition only the boxes that meet it."""


def _row_schema(l: int, m: int) -> str:
    cols = ["rid bigint"]
    cols += [f"ol{j} bigint, oh{j} bigint" for j in range(l)]
    cols += [f"{f}{k} bigint" for k in range(m) for f in (*_FIELDS, "hl", "hh")]
    return ", ".join(cols)


def _decoder(l: int, m: int):  # type: ignore[no-untyped-def]
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from dslog_dagster.core.combine import singleton_rows
        from dslog_dagster.core.format.blob import table_from_blob

        for b in batches:
            for blob in b.column(0).to_pylist():
                t = singleton_rows(table_from_blob(bytes(blob)))
                hlo, hhi = t.input_hulls() if m else (np.zeros((0, t.rows)),) * 2
                cols: dict[str, Any] = {"rid": np.arange(t.rows, dtype=np.int64)}
                for j in range(l):
                    cols[f"ol{j}"] = t.out_lo[j]
                    cols[f"oh{j}"] = t.out_hi[j]
                for k in range(m):
                    for f in _FIELDS:
                        cols[f"{f}{k}"] = getattr(t, f)[k]
                    cols[f"hl{k}"] = hlo[k]
                    cols[f"hh{k}"] = hhi[k]
                yield pa.RecordBatch.from_pydict(cols)

    return run


def _prepared(t: pa.Table, idx: np.ndarray, l: int, m: int) -> Any:
    """The native table of rows ``idx`` of ``t`` (the decoded schema, :func:`_row_schema`)."""
    from dslog_dagster.core.native import kernels as _native

    def mat(names: Sequence[str]) -> np.ndarray:
        if not names:
            return np.zeros((0, len(idx)), np.int64)
        return np.ascontiguousarray(
            np.stack([t.column(n).to_numpy()[idx] for n in names]).astype(np.int64)
        )

    return _native.PreparedTable(
        l,
        m,
        len(idx),
        mat([f"ol{j}" for j in range(l)]),
        mat([f"oh{j}" for j in range(l)]),
        *[mat([f"{f}{k}" for k in range(m)]) for f in _FIELDS],
    )


def _answer(lo: np.ndarray, hi: np.ndarray, d_dst: int) -> pa.RecordBatch:
    cols = {"n": np.ones(lo.shape[0], np.int64)}
    for i in range(d_dst):
        cols[f"lo{i}"] = lo[:, i]
        cols[f"hi{i}"] = hi[:, i]
    return pa.RecordBatch.from_pydict(cols)


def _prober(l: int, m: int, forward: bool, d_dst: int, qlo: np.ndarray, qhi: np.ndarray):  # type: ignore[no-untyped-def]
    """A partition's rows joined to every query box (``qlo``/``qhi`` travel with the task)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        t = pa.Table.from_batches(parts)
        table = _prepared(t, np.arange(t.num_rows), l, m)
        lo, hi = table.hop(qlo, qhi, forward)
        yield _answer(lo, hi, d_dst)

    return run


def _hopper(l: int, m: int, forward: bool, d_src: int, d_dst: int):  # type: ignore[no-untyped-def]
    """The rows and boxes that met in a partition (rows repeat once per box they meet)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        t = pa.Table.from_batches(parts)
        _, ri = np.unique(t.column("rid").to_numpy(), return_index=True)
        _, bi = np.unique(t.column("bid").to_numpy(), return_index=True)
        table = _prepared(t, ri, l, m)

        def boxes(names: Sequence[str]) -> np.ndarray:
            if not names:  # a 0-d source: one empty box
                return np.zeros((len(bi), 0), np.int64)
            return np.ascontiguousarray(
                np.stack([t.column(n).to_numpy()[bi] for n in names], axis=1).astype(np.int64)
            )

        qlo = boxes([f"qlo{i}" for i in range(d_src)])
        qhi = boxes([f"qhi{i}" for i in range(d_src)])
        lo, hi = table.hop(qlo, qhi, forward)
        yield _answer(lo, hi, d_dst)

    return run


class SparkQueryEngine:
    """Runs ``prov_query`` with Spark (see the module docstring).

    Args:
        spark: the SparkSession.
        log: the DSLog session (or a store directory) whose lineage is queried.

    Raises:
        SparkUnavailableError: the session's Python workers cannot import NumPy, pyarrow and
            dslog_dagster (see :func:`~dslog_dagster.spark.session.check_workers`).
    """

    def __init__(self, spark: Any, log: DSLog | str) -> None:
        check_workers(spark)  # its hops run NumPy and pyarrow in Python workers
        self.spark = spark
        self.log = log if isinstance(log, DSLog) else DSLog(log)
        self._rows: dict[tuple[str, str, str], DataFrame] = {}

    def _table_rows(self, hop: Hop) -> tuple[DataFrame, int, int]:
        op = hop.operation
        out, inp = (
            (hop.dst.name, hop.src.name)
            if hop.direction == "forward"
            else (hop.src.name, hop.dst.name)
        )
        rec = op.table(out, inp)
        l = len(hop.dst.shape if hop.direction == "forward" else hop.src.shape)
        m = len(hop.src.shape if hop.direction == "forward" else hop.dst.shape)
        key = (op.op_id, out, inp)
        if key not in self._rows:
            # the compressed table (small next to the relation it encodes) goes to one
            # executor, which expands it to rows; the rows are then spread for the joins
            blob = self.log.store.read_blob(op, out, inp)
            blobs = self.spark.createDataFrame(pa.table({"blob": pa.array([blob], pa.binary())}))
            rows = blobs.mapInArrow(_decoder(l, m), _row_schema(l, m))
            parts = max(1, min(64, rec.rows // _ROWS_PER_PARTITION))
            if parts > 1:
                rows = rows.repartition(parts)
            self._rows[key] = rows.cache()
        return self._rows[key], l, m

    def _hop(self, hop: Hop, cells: CellSet) -> CellSet:
        if cells.is_empty():
            return CellSet.empty(hop.dst.shape)
        rows, l, m = self._table_rows(hop)
        forward = hop.direction == "forward"
        d_src, d_dst = len(hop.src.shape), len(hop.dst.shape)
        schema = ", ".join(["n bigint", *[f"lo{i} bigint, hi{i} bigint" for i in range(d_dst)]])
        if cells.n_boxes <= BOXES_INLINE:
            qlo = np.ascontiguousarray(cells.lo, dtype=np.int64).reshape(-1, d_src)
            qhi = np.ascontiguousarray(cells.hi, dtype=np.int64).reshape(-1, d_src)
            probe = _prober(l, m, forward, d_dst, qlo, qhi)
            got = rows.mapInArrow(probe, schema).toArrow()
        else:
            got = self._joined(rows, l, m, forward, d_src, d_dst, cells, schema)
        n = got.num_rows
        lo = np.zeros((n, d_dst), np.int64)
        hi = np.zeros((n, d_dst), np.int64)
        for i in range(d_dst):
            lo[:, i] = got.column(f"lo{i}").to_numpy()
            hi[:, i] = got.column(f"hi{i}").to_numpy()
        if d_dst == 0:
            return CellSet(hop.dst.shape, lo[:1], hi[:1])
        return CellSet.from_boxes(hop.dst.shape, lo, hi)

    def _joined(
        self,
        rows: DataFrame,
        l: int,
        m: int,
        forward: bool,
        d_src: int,
        d_dst: int,
        cells: CellSet,
        schema: str,
    ) -> pa.Table:
        """A hop over many boxes: a range join sends each partition the boxes that meet it."""
        data: dict[str, Any] = {"bid": np.arange(cells.n_boxes, dtype=np.int64)}
        for i in range(d_src):
            data[f"qlo{i}"] = cells.lo[:, i]
            data[f"qhi{i}"] = cells.hi[:, i]
        boxes = self.spark.createDataFrame(pa.table(data))
        conds = []
        for i in range(d_src):
            lo_c, hi_c = (f"hl{i}", f"hh{i}") if forward else (f"ol{i}", f"oh{i}")
            conds.append((F.col(f"qlo{i}") <= F.col(hi_c)) & (F.col(f"qhi{i}") >= F.col(lo_c)))
        cond = conds[0] if conds else F.lit(True)
        for c in conds[1:]:
            cond = cond & c
        joined = rows.join(F.broadcast(boxes), cond, "inner")
        return joined.mapInArrow(_hopper(l, m, forward, d_src, d_dst), schema).toArrow()

    def prov_query(self, path: Sequence[Any], cells: object) -> CellSet:
        """Cells of the last array of ``path`` linked to ``cells`` of the first (like
        :meth:`DSLog.prov_query <dslog_dagster.core.api.DSLog.prov_query>`)."""
        plan = self.log.plan(path)
        cur = as_cells(plan.source.shape, cells)
        for hop in plan.hops:
            if hop.prepared is None:  # no lineage (or on demand, not reconstructed: refused)
                hop.run(cur)
                return CellSet.empty(plan.target.shape)
            cur = self._hop(hop, cur)
        return cur

    def lineage_between(
        self, src: Any, dst: Any, cells: object, *, direction: Direction | None = None
    ) -> CellSet:
        """Like :meth:`DSLog.lineage_between <dslog_dagster.core.api.DSLog.lineage_between>`
        (the union over every path, what the query assets answer), each hop run on Spark."""
        return self.log.lineage_between(src, dst, cells, direction=direction, run_hop=self._run_hop)

    def _run_hop(self, hop: Hop, cells: CellSet) -> CellSet:
        if hop.prepared is None:  # no lineage: empty (on demand, not reconstructed: refused)
            return hop.run(cells)
        return self._hop(hop, cells)

    def close(self) -> None:
        """Drop the cached table rows."""
        for df in self._rows.values():
            df.unpersist()
        self._rows.clear()


def run_query(
    log: DSLog,
    path: Sequence[Any],
    cells: object,
    *,
    engine: Engine = "native",
    spark: Any = None,
) -> CellSet:
    """``prov_query`` on the engine chosen by configuration.

    Args:
        engine: ``"native"`` (in-situ C++ on this machine) or ``"spark"``
            (:class:`SparkQueryEngine`; needs ``spark``).
    """
    if check_engine(engine) == "native":
        return log.prov_query(path, cells)
    if spark is None:
        msg = "engine='spark' needs a SparkSession (`spark=`)."
        raise QueryError(msg)
    return SparkQueryEngine(spark, log).prov_query(path, cells)


def spark_engine(log: DSLog, spark: Any = None) -> SparkQueryEngine:
    """A :class:`SparkQueryEngine` on ``spark``, else on the running SparkSession, else on a
    local one (what the query assets and ``dslog query --engine spark`` use)."""
    if spark is None:
        from pyspark.sql import SparkSession

        from dslog_dagster.spark.session import get_session

        spark = SparkSession.getActiveSession() or get_session()
    return SparkQueryEngine(spark, log)
