"""Reference multi-hop lineage queries over RAW (uncompressed) relations.

The in-situ query engine answers "which cells of the last array are connected to these cells of
the first array" directly on ProvRC tables. These baselines answer the same question the way the
ICDE paper's competitors do — over the raw pair relations — so tests have independent ground
truth and the benchmark has honest opponents:

* :func:`naive_join` — set-based Python, obviously correct, slow: the tests' ground truth.
* :class:`NumPyBaseline` — per hop ``np.isin`` on flat cell indices, then ``np.unique``.
* :class:`DuckDBRawBaseline` — the relations as DuckDB in-memory tables, one multi-hop SQL
  statement with ``DISTINCT`` after every hop.
* :class:`DuckDBParquetBaseline` — the same SQL over zstd Parquet files (``read_parquet``).

The prototype's baselines joined without ``DISTINCT`` (duplicates multiplied across many-to-one
hops) and probed one query cell at a time; these do neither, so a benchmark win is a real win.

A query follows a chain of hops. A :class:`Hop` is a relation plus a direction: ``"backward"``
maps cells of the relation's output array to cells of its input array, ``"forward"`` maps input
cells to output cells. Query cells are an ``(n, d)`` int64 matrix over the first hop's source
array; every implementation returns the sorted (C order = lexicographic), duplicate-free
``(k, d')`` int64 matrix of cells of the last hop's target array.

Loading (building tables, writing Parquet, encoding flat indices) happens in the constructors so a
benchmark can time :meth:`query` alone. 0-d arrays are supported: their single cell is the empty
index tuple (``(n, 0)`` query matrices); SQL sees them as one column that is always 0.

This module imports neither Dagster nor Spark.
"""

import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from dslog_dagster.core.relation import I64, LineageRelation, Shape
from dslog_dagster.errors import QueryError

__all__ = [
    "Direction",
    "DuckDBParquetBaseline",
    "DuckDBRawBaseline",
    "Hop",
    "NumPyBaseline",
    "as_hops",
    "naive_join",
]

Direction = Literal["backward", "forward"]


@dataclass(frozen=True, slots=True)
class Hop:
    """One step of a query path: a relation read in one direction."""

    relation: LineageRelation
    direction: Direction

    @property
    def source_shape(self) -> Shape:
        """Shape of the array this hop's cells come from."""
        r = self.relation
        return r.out_shape if self.direction == "backward" else r.in_shape

    @property
    def target_shape(self) -> Shape:
        """Shape of the array this hop's cells go to."""
        r = self.relation
        return r.in_shape if self.direction == "backward" else r.out_shape

    @property
    def source_cols(self) -> I64:
        """``(rank, n)`` index columns on the source side."""
        r = self.relation
        return r.out_cols if self.direction == "backward" else r.in_cols

    @property
    def target_cols(self) -> I64:
        """``(rank, n)`` index columns on the target side."""
        r = self.relation
        return r.in_cols if self.direction == "backward" else r.out_cols


def as_hops(hops: Iterable[Any]) -> tuple[Hop, ...]:
    """Validate a query path: ``Hop`` objects or ``(relation, direction)`` tuples.

    Consecutive hops must meet on an array of the same shape (the target of hop ``k`` is the
    source of hop ``k + 1``); a path of zero hops has no source array and is rejected.

    Raises:
        QueryError: empty path, unknown direction, non-relation, or shapes that do not chain.
    """
    out: list[Hop] = []
    for k, h in enumerate(hops):
        if not isinstance(h, Hop):
            try:
                rel, direction = h
            except (TypeError, ValueError) as e:
                msg = f"Hop {k} must be a Hop or a (relation, direction) pair, got {h!r}."
                raise QueryError(msg) from e
            h = Hop(rel, direction)
        if not isinstance(h.relation, LineageRelation):
            msg = f"Hop {k}: expected a LineageRelation, got {type(h.relation).__name__}."
            raise QueryError(msg)
        if h.direction not in ("backward", "forward"):
            msg = f"Hop {k}: direction must be 'backward' or 'forward', got {h.direction!r}."
            raise QueryError(msg)
        if out and out[-1].target_shape != h.source_shape:
            msg = (
                f"Hop {k} starts on an array of shape {h.source_shape} but hop {k - 1} ends on "
                f"shape {out[-1].target_shape}; consecutive hops must share an array."
            )
            raise QueryError(msg)
        out.append(h)
    if not out:
        msg = "A lineage query needs at least one hop."
        raise QueryError(msg)
    return tuple(out)


def _query_cells(cells: npt.ArrayLike, shape: Shape) -> I64:
    """Validate ``(n, rank)`` query cells against ``shape``; returns a contiguous int64 copy."""
    arr = np.asarray(cells)
    rank = len(shape)
    if arr.size == 0 and arr.ndim != 2:
        arr = arr.reshape(0, rank).astype(np.int64)  # e.g. [] (float64) or np.empty(0)
    if arr.ndim != 2 or arr.shape[1] != rank:
        msg = f"Query cells must be an (n, {rank}) matrix for shape {shape}, got {arr.shape}."
        raise QueryError(msg)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        msg = f"Query cells must be integers, got dtype `{arr.dtype}`."
        raise QueryError(msg)
    out = np.ascontiguousarray(arr, dtype=np.int64)
    if len(out):
        lo, hi = out.min(axis=0), out.max(axis=0)
        for d, extent in enumerate(shape):
            if lo[d] < 0 or hi[d] >= extent:
                msg = f"Query cell index out of bounds on axis {d} for shape {shape}."
                raise QueryError(msg)
    return out


def _flat(cols: I64, shape: Shape) -> I64:
    """C-order flat indices of ``(rank, n)`` columns (all zeros for a 0-d shape)."""
    if not shape:
        return np.zeros(cols.shape[1], dtype=np.int64)
    flat: I64 = np.ravel_multi_index(tuple(cols), shape).astype(np.int64, copy=False)
    return flat


def _unflat(flat: I64, shape: Shape) -> I64:
    """``(n, rank)`` cells of C-order flat indices."""
    if not shape:
        return np.zeros((flat.size, 0), dtype=np.int64)
    return np.ascontiguousarray(np.stack(np.unravel_index(flat, shape), axis=1), dtype=np.int64)


def naive_join(hops: Iterable[Any], cells: npt.ArrayLike) -> I64:
    """Ground truth: follow the hops with Python sets of index tuples.

    Deliberately the simplest possible code (a dict from source cell to target cells per hop,
    then a set-union frontier) so that tests can trust it; quadratic-free but Python-speed.

    Args:
        hops: the path, see :func:`as_hops`.
        cells: ``(n, d)`` cells of the first hop's source array.

    Returns:
        Sorted unique ``(k, d')`` int64 cells of the last hop's target array.
    """
    path = as_hops(hops)
    q = _query_cells(cells, path[0].source_shape)
    frontier: set[tuple[int, ...]] = {tuple(int(v) for v in row) for row in q}
    for h in path:
        edges: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
        src = h.source_cols.T.tolist()
        dst = h.target_cols.T.tolist()
        if not h.source_shape and not h.target_shape:  # no columns: n copies of ((), ())
            src = dst = [[]] * h.relation.n
        elif not h.source_shape:
            src = [[]] * len(dst)
        elif not h.target_shape:
            dst = [[]] * len(src)
        for s, t in zip(src, dst, strict=True):
            edges.setdefault(tuple(s), set()).add(tuple(t))
        frontier = set().union(*(edges.get(c, set()) for c in frontier))
    rank = len(path[-1].target_shape)
    out = np.array(sorted(frontier), dtype=np.int64).reshape(len(frontier), rank)
    return out


class NumPyBaseline:
    """The ICDE "Array" baseline done right: vectorised ``np.isin`` per hop.

    At load time each hop's source and target columns are encoded as flat C-order indices
    (``np.ravel_multi_index`` on the array shape) so membership is a 1-D int64 test. A query
    encodes its cells the same way and per hop keeps the distinct ``target[np.isin(source, q)]``
    (deduplicated with a boolean mask over the target array when that is not much larger than
    the hits, else ``np.unique``) — the strongest plain-NumPy version we know, so that a win
    against it means something.
    """

    name = "numpy"

    def __init__(self, hops: Iterable[Any]) -> None:
        self.hops = as_hops(hops)
        self._src = [_flat(h.source_cols, h.source_shape) for h in self.hops]
        self._dst = [_flat(h.target_cols, h.target_shape) for h in self.hops]

    def query(self, cells: npt.ArrayLike) -> I64:
        """Cells of the last array connected to ``cells`` of the first; see the module doc."""
        first = self.hops[0].source_shape
        q = np.unique(_flat(np.ascontiguousarray(_query_cells(cells, first).T), first))
        for h, src, dst in zip(self.hops, self._src, self._dst, strict=True):
            if q.size == 0:
                break
            reached = dst[np.isin(src, q)]
            size = int(np.prod(h.target_shape, dtype=np.int64))
            if size <= max(4 * reached.size, 1 << 16):
                # Dense dedupe: a boolean mask over the target array is O(n), sorting is not.
                seen = np.zeros(size, dtype=bool)
                seen[reached] = True
                q = np.flatnonzero(seen).astype(np.int64, copy=False)
            else:
                q = np.unique(reached)
        return _unflat(q, self.hops[-1].target_shape)

    def close(self) -> None:
        """Nothing to release; present so all baselines share one interface."""

    def __enter__(self) -> "NumPyBaseline":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _arrow_relation(h: Hop) -> pa.Table:
    """A hop's relation as an Arrow table with columns ``o0..``, ``i0..`` (a 0-d side: ``o0=0``)."""
    r = h.relation
    cols: dict[str, Any] = {}
    for prefix, mat in (("o", r.out_cols), ("i", r.in_cols)):
        if mat.shape[0] == 0:
            cols[f"{prefix}0"] = np.zeros(r.n, dtype=np.int64)
        for d in range(mat.shape[0]):
            cols[f"{prefix}{d}"] = mat[d]
    return pa.table(cols)


def _sql(hops: Sequence[Hop], sources: Sequence[str], query_rank: int) -> str:
    """One statement: the query cells, then per hop a ``DISTINCT`` equi-join on the source columns.

    ``sources[k]`` is the table expression of hop ``k`` (a table name or a ``read_parquet``
    call). Query and intermediate cells are named ``c0..``; a 0-d array is one ``c0`` column of
    zeros, matching :func:`_arrow_relation`.
    """
    ctes = [
        f"h0 AS (SELECT DISTINCT {', '.join(f'c{d}' for d in range(max(query_rank, 1)))} FROM q)"
    ]
    for k, (h, src) in enumerate(zip(hops, sources, strict=True)):
        s, t = ("o", "i") if h.direction == "backward" else ("i", "o")
        s_rank = max(len(h.source_shape), 1)
        t_rank = max(len(h.target_shape), 1)
        sel = ", ".join(f"r.{t}{d} AS c{d}" for d in range(t_rank))
        on = " AND ".join(f"r.{s}{d} = p.c{d}" for d in range(s_rank))
        ctes.append(f"h{k + 1} AS (SELECT DISTINCT {sel} FROM {src} AS r JOIN h{k} AS p ON {on})")
    last = max(len(hops[-1].target_shape), 1)
    order = ", ".join(f"c{d}" for d in range(last))
    return f"WITH {', '.join(ctes)} SELECT {order} FROM h{len(hops)} ORDER BY {order}"


class _DuckDBBaseline:
    """Shared query path of the two DuckDB baselines; subclasses say where the relations live."""

    name = "duckdb"

    def __init__(self, hops: Iterable[Any], sources: Sequence[str] | None = None) -> None:
        self.hops = as_hops(hops)
        self.con = duckdb.connect(":memory:")
        self._sources = list(sources or [])

    def _finish(self) -> None:
        self._statement = _sql(self.hops, self._sources, len(self.hops[0].source_shape))

    def query(self, cells: npt.ArrayLike) -> I64:
        """Cells of the last array connected to ``cells`` of the first; see the module doc."""
        first = self.hops[0].source_shape
        q = _query_cells(cells, first)
        cols = {f"c{d}": q[:, d] for d in range(q.shape[1])} or {"c0": np.zeros(len(q), np.int64)}
        self.con.register("q", pa.table(cols))
        try:
            res = self.con.sql(self._statement).fetchnumpy()
        finally:
            self.con.unregister("q")
        last = self.hops[-1].target_shape
        if not last:
            return np.zeros((len(res["c0"]), 0), dtype=np.int64)
        mat = np.stack([np.asarray(res[f"c{d}"], dtype=np.int64) for d in range(len(last))], 1)
        return np.ascontiguousarray(mat.reshape(-1, len(last)))

    def close(self) -> None:
        """Close the DuckDB connection."""
        self.con.close()

    def __enter__(self) -> "_DuckDBBaseline":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DuckDBRawBaseline(_DuckDBBaseline):
    """Raw relations as DuckDB in-memory tables ``hop0, hop1, ...`` (columns ``o0..``, ``i0..``).

    Construction loads the tables; :meth:`query` registers the query cells as an Arrow table
    and runs one multi-hop SQL statement with ``DISTINCT`` after every hop.

    Args:
        hops: the path, see :func:`as_hops`.
        threads: DuckDB worker threads (default: DuckDB's own choice).
    """

    name = "duckdb-raw"

    def __init__(self, hops: Iterable[Any], *, threads: int | None = None) -> None:
        super().__init__(hops)
        if threads is not None:
            self.con.execute(f"SET threads = {int(threads)}")
        for k, h in enumerate(self.hops):
            self.con.register("tmp_rel", _arrow_relation(h))
            self.con.execute(f"CREATE TABLE hop{k} AS SELECT * FROM tmp_rel")
            self.con.unregister("tmp_rel")
            self._sources.append(f"hop{k}")
        self._finish()


class DuckDBParquetBaseline(_DuckDBBaseline):
    """Raw relations as zstd Parquet files ``hop{k}.parquet`` queried with ``read_parquet``.

    The files are written once by the constructor (into ``directory``, or a temporary directory
    removed by :meth:`close`); every query re-reads them, as a Parquet-backed system would.

    Args:
        hops: the path, see :func:`as_hops`.
        directory: where to write the files; created if missing.
        threads: DuckDB worker threads (default: DuckDB's own choice).
    """

    name = "duckdb-parquet"

    def __init__(
        self,
        hops: Iterable[Any],
        directory: str | Path | None = None,
        *,
        threads: int | None = None,
    ) -> None:
        super().__init__(hops)
        if threads is not None:
            self.con.execute(f"SET threads = {int(threads)}")
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="dslog-parquet-")
            directory = self._tmp.name
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        for k, h in enumerate(self.hops):
            path = self.directory / f"hop{k}.parquet"
            pq.write_table(_arrow_relation(h), path, compression="zstd")
            escaped = str(path).replace("'", "''")
            self._sources.append(f"read_parquet('{escaped}')")
        self._finish()

    def close(self) -> None:
        """Close the connection and remove the files if they live in a temporary directory."""
        super().close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
