"""The id tap: which input rows fell into which group, recorded where the rows stream.

An aggregation's lineage is "output row ``o`` ← every input row of its group". The capture
summarises each group's ids as a range in the aggregation itself (cheap hash aggregates,
exact when the keys are clustered by row id); when they are not (shuffled keys), the ids
have to be found again. Joining the aggregation's input with the failed groups' keys costs
a second computation of that input, a join and a JVM → Python transfer of every id — about
as much as the step itself at 10^6 rows.

The tap avoids all three, and where it runs the aggregation computes no range at all: every
group's ids come from the tap, and the aggregation only counts them (see
:mod:`~dslog_dagster.spark.summaries`). ``tap(token, key, id)`` is a small JVM function
(``jvm/IdTap.java``; a nondeterministic Spark SQL function that compiles to a static call,
so the optimizer neither drops, duplicates nor moves it) placed under the aggregation: it
returns ``id`` and remembers ``(key, id)`` for the running task, which writes them to one
binary file per map partition when it succeeds. The capture then reads the files (on the
driver's disk: a local master's executors run in the driver's JVM; on a cluster, in the folder
it shares with the executors, :mod:`~dslog_dagster.spark.staging`), matches their keys with
the failed groups' keys and compresses their ids (:func:`tapped_ids`: rows of one key with
consecutive ids, or one id repeated, are recorded as runs, and a group tapped as one
interval reaches ProvRC as that interval). This is Titian's capture at the stage boundary,
made exact, checked and persisted:

* only where the driver reads the executors' files (a local master, or a cluster's shared
  folder; a folder that is not in fact shared loses files, and the counts below then fall
  back to the join). One integral group key is
  recorded as it is (compared as ``bigint``: equal keys, equal groups; a null key is its own
  group). Other keys — strings, decimals, dates, several keys — are recorded as
  ``xxhash64`` of the keys, which the aggregation also outputs (a slot of its own);
  two groups with one hash get each other's rows, so their counts (below) do not match and
  the capture falls back: a collision costs time, never exactness. Keys whose equal values
  may hash apart (floats, collated strings, nested types) are not tapped;
* the files are matched one stage at a time (a retried task replaces its partition's file):
  every failed group must receive exactly as many tapped rows from the stage as its
  ``count(id)`` in the aggregation. A stage that ran the tap on only some partitions, or a
  file lost, does not match. When no stage matches, the capture falls back to the join
  (:func:`~dslog_dagster.spark.lineage.refetch_ids`), which is always exact.

  Several stages appear when Spark computes the aggregation's input twice: an ``orderBy``
  above an aggregation that needs no shuffle of its own (its input already partitioned by the
  keys, say by a sort-merge join) samples its input in a job of its own, which runs the map
  side once more. The input is deterministic (the capture checks it), so every complete stage
  records the same pairs and any one that matches is exact.

The JVM class is compiled once per machine and PySpark version with ``javac`` (a JDK; ~2 s)
and cached under ``$XDG_CACHE_HOME/dslog-dagster/jvm``; :func:`~dslog_dagster.spark.session.
get_session` puts it on the session's class path. Without ``javac``, or in a session started
elsewhere, the capture uses the join.
"""

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from dslog_dagster.core import background, progress
from dslog_dagster.core.compression import (
    compress,
    compress_grouped,
    compress_ranges,
    expand_ranges,
    stable_order,
    union_tables,
)
from dslog_dagster.core.native import kernels
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.spark.java import java_tool
from dslog_dagster.spark.jvm_bridge import java_session, jvm_view
from dslog_dagster.spark.lineage import FailedRows, RangeColumns, hashable, range_rows
from dslog_dagster.spark.rowid import MID, PART_BITS
from dslog_dagster.spark.staging import staging_base
from dslog_dagster.spark.summaries import KeyIndex
from dslog_dagster.spark.tapfile import (
    TapFailed,
    TapLayout,
    TapRecords,
    read_tap_records,
    tap_layout,
    tap_rows,
)

__all__ = [
    "FUNCTION",
    "INTEGRAL",
    "PROPERTY",
    "SUMMARY",
    "TapFailed",
    "TapRecords",
    "read_tap_records",
    "summary_column",
    "summary_sql",
    "tap_column",
    "tap_jar",
    "tap_key",
    "tap_key_sql",
    "tap_ready",
    "tap_rows",
    "tap_sql",
    "tapped_ids",
    "tapping",
]

log = logging.getLogger(__name__)

FUNCTION = "__dslog_id_tap"
"""The tap's name in a session's function registry."""

INTEGRAL = ("tinyint", "smallint", "int", "bigint")
"""Key types the tap compares exactly as ``bigint``."""

MAX_GROUPS = 20_000_000
"""Failed groups above this are found by the join (matching holds their keys in memory)."""

_SPARK_JARS = (
    "spark-core_",
    "spark-sql-api_",
    "spark-sql_",
    "spark-catalyst_",
    "spark-common-utils_",
    "scala-",
)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dslog-dagster" / "jvm"


@functools.cache
def tap_jar() -> Path | None:
    """The tap's jar, compiled on first use (cached per source and PySpark version), or
    ``None`` when no JDK compiler is available or it fails (the reason is logged)."""
    import pyspark

    source = resources.files("dslog_dagster.spark").joinpath("jvm", "IdTap.java").read_bytes()
    digest = hashlib.sha256(source + pyspark.__version__.encode()).hexdigest()[:16]
    jar = _cache_dir() / f"dslog-idtap-{digest}.jar"
    if jar.exists():
        return jar
    javac = java_tool("javac")
    if javac is None:
        log.info(
            "No `javac` (a JDK) found: aggregations with shuffled keys find their ids by a "
            "join, which is slower. Install a JDK (e.g. openjdk-17-jdk-headless) to use the "
            "id tap."
        )
        return None
    jars_dir = Path(pyspark.__file__).parent / "jars"
    classpath = [str(p) for p in sorted(jars_dir.glob("*.jar")) if p.name.startswith(_SPARK_JARS)]
    with tempfile.TemporaryDirectory(prefix="dslog-idtap-") as tmp:
        src = Path(tmp) / "IdTap.java"
        src.write_bytes(source)
        out = Path(tmp) / "classes"
        cmd = [javac, "--release", "17", "-nowarn", "-cp", os.pathsep.join(classpath)]
        with progress.phase("compiling the id tap (once per machine and PySpark version)"):
            done = subprocess.run(
                [*cmd, "-d", str(out), str(src)], capture_output=True, text=True, check=False
            )
        if done.returncode != 0:
            log.warning(
                "Could not compile the id tap (%s); aggregations with shuffled keys find "
                "their ids by a join:\n%s",
                javac,
                done.stderr.strip()[-2000:],
            )
            return None
        jar.parent.mkdir(parents=True, exist_ok=True)
        part = jar.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for cls in sorted(out.rglob("*.class")):
                z.write(cls, cls.relative_to(out).as_posix())
        os.replace(part, jar)  # another process building the same jar writes the same bytes
    return jar


def tap_ready(spark: SparkSession) -> bool:
    """Whether the session can run the tap here: a folder its executors write and this
    process reads (a local master, or a cluster's shared folder: :func:`~dslog_dagster.spark.
    staging.staging_base`) and the class loaded in the driver (registers :data:`FUNCTION`;
    one JVM call)."""
    if staging_base(spark) is None:
        return False
    session = java_session(spark)
    key = (id(spark.sparkContext), str(session.toString()))
    if key not in _REGISTERED:
        try:
            jvm_view(spark).dslog.spark.IdTap.register(session, FUNCTION)
        except Exception:  # py4j: the class is not on this session's class path
            return False
        _REGISTERED.add(key)
    return True


_REGISTERED: set[tuple[int, str]] = set()
"""Sessions (by SparkContext and JVM session object) with :data:`FUNCTION` registered."""


def _hashed(types: Sequence[str]) -> bool | None:
    """Whether the tap records the hash of group keys of ``simpleString`` types ``types``
    (False: the one integral key as it is), or None when they are not tapped: keys whose
    equal values may hash apart (see module)."""
    if len(types) == 1 and types[0] in INTEGRAL:
        return False
    if types and all(hashable(t) for t in types):
        return True
    return None


def tap_key(keys: Sequence[Column], types: Sequence[str]) -> tuple[Column, bool] | None:
    """The ``bigint`` the tap records for the group keys ``keys`` (``simpleString`` types
    ``types``) and whether it is their hash, or None when they are not tapped: one integral
    key as it is, else ``xxhash64`` of keys whose equal values hash equally (see module)."""
    hashed = _hashed(types)
    if hashed is None:
        return None
    return (F.xxhash64(*keys), True) if hashed else (keys[0], False)


def tap_key_sql(names: Sequence[str], types: Sequence[str]) -> tuple[str, bool] | None:
    """:func:`tap_key` for keys that are plain column names, as SQL text (one JVM call to
    use, where the Column form costs one per operator)."""
    hashed = _hashed(types)
    if hashed is None:
        return None
    quoted = ["`" + n.replace("`", "``") + "`" for n in names]
    return (f"xxhash64({', '.join(quoted)})", True) if hashed else (quoted[0], False)


def tap_sql(token: int, key: str, ids: str) -> str:
    """:func:`tap_column` as SQL text, for a key and ids given as SQL text."""
    k = f"CAST({key} AS BIGINT)"
    return f"{FUNCTION}({token}, coalesce({k}, 0L), isnull({k}), {ids})"


SUMMARY = FUNCTION + "_sum"
"""The summary recorder's name in a session's function registry (see
:mod:`~dslog_dagster.spark.summaries`)."""


def summary_sql(token: int, key: str, lo: str, hi: str, ok: str, n: str) -> str:
    """``lo``, recording the group's ``(key, lo, hi, ok, n)`` into the directory of
    ``token`` (SQL text over an aggregation's keys and aggregate functions)."""
    k = f"CAST({key} AS BIGINT)"
    return f"{SUMMARY}({token}, coalesce({k}, 0L), isnull({k}), {lo}, {hi}, {ok}, {n})"


def summary_column(token: int, key: Column, lo: str, hi: str, ok: str, n: str) -> Column:
    """:func:`summary_sql` for a key given as a Column."""
    k = key.cast("bigint")
    parts = [F.expr(x) for x in (lo, hi, ok, n)]
    return F.call_function(SUMMARY, F.lit(token), F.coalesce(k, F.lit(0)), k.isNull(), *parts)


def tap_column(token: int, key: Column, ids: Column) -> Column:
    """``ids``, recording ``(key, id)`` per row into the directory of ``token`` in the jobs
    run inside :func:`tapping` (see the module)."""
    k = key.cast("bigint")
    return F.call_function(FUNCTION, F.lit(token), F.coalesce(k, F.lit(0)), k.isNull(), ids)


PROPERTY = "dslog.idtap."
"""Prefix of the local properties naming the tokens' directories (``IdTap.PROPERTY``)."""


@contextlib.contextmanager
def tapping(spark: SparkSession, directories: Sequence[str]) -> Iterator[None]:
    """Within the block, jobs this thread starts record token ``i``'s rows into
    ``directories[i]``. Spark local properties are per driver thread and travel with the
    thread's jobs to their tasks, so concurrent captures in one process keep their taps
    apart, and the token, not the directory, is what the generated code holds."""
    sc = spark.sparkContext
    for i, d in enumerate(directories):
        sc.setLocalProperty(f"{PROPERTY}{i}", d)
    try:
        yield
    finally:
        for i in range(len(directories)):
            sc.setLocalProperty(f"{PROPERTY}{i}", None)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class _FailedGroups:
    """The groups whose range check failed, read from the staged output: distinct non-null
    keys (sorted; group ``g``), then the null-key group (``g = len(keys)``, when present);
    per group its ids' count ``n`` and its output rows ``rows[start[g] : start[g] + count[g]]``
    (``MID``; a group is on several rows when a step after the aggregation repeated it)."""

    keys: np.ndarray
    has_null: bool
    n: np.ndarray
    start: np.ndarray
    count: np.ndarray
    rows: np.ndarray

    @property
    def groups(self) -> int:
        return self.keys.size + int(self.has_null)

    def first_rows(self, dense: np.ndarray) -> np.ndarray:
        """Each group's first output row in ``dense`` (the rows' dense numbers): ``dense``
        itself when every row is a group of its own (``start`` is then 0, 1, ...)."""
        return dense if self.start.size == dense.size else dense[self.start]


def _read_failed(staged: str, slot: RangeColumns, hashed: bool) -> FailedRows:
    """The failed rows of a range slot, read from the staged output."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    # the recorded key: the keys' hash, or the one integral key (see tap_key)
    key_col = slot.hash if hashed else slot.keys[0] if slot.keys else None
    if key_col is None:
        msg = "the slot's group keys are not in the output"
        raise TapFailed(msg)
    if slot.summary is not None:  # the pass hands these over (RowTables.failed_rows)
        msg = "the failed rows of a slot with recorded summaries come from the pass"
        raise TapFailed(msg)
    assert slot.ok is not None
    assert slot.n is not None
    t = pq.read_table(staged, columns=list(dict.fromkeys([MID, slot.lo, slot.ok, slot.n, key_col])))

    def col(name: str) -> pa.Array:
        return t.column(name).combine_chunks()

    valid, ok = range_rows(col(slot.lo), col(slot.ok))
    bad = valid & ~ok
    key = col(key_col).filter(pa.array(bad))
    return FailedRows(
        col(MID).filter(pa.array(bad)).to_numpy().astype(np.int64),
        pc.fill_null(key.cast(pa.int64()), 0).to_numpy(zero_copy_only=False),
        np.asarray(key.is_null().to_numpy(zero_copy_only=False), bool),
        col(slot.n).to_numpy(zero_copy_only=False)[bad].astype(np.int64),
    )


def _failed_groups(
    staged: str,
    slot: RangeColumns,
    hashed: bool = False,
    rows: Sequence[FailedRows] | None = None,
) -> _FailedGroups:
    """:class:`_FailedGroups` of the range slot with summary columns ``slot`` in the staged
    output, keyed by the group's one integral key or, ``hashed``, by the hash of its keys
    (``rows``: the failed rows as the pass's read-back met them, one part per staged file,
    else read here).

    Raises:
        TapFailed: two rows of one group disagree on its count (not one aggregation's group).
    """
    parts = list(rows) if rows is not None else [_read_failed(staged, slot, hashed)]
    placed = _placed_by_key(parts)
    if placed is not None:
        return placed
    whole = parts[0] if len(parts) == 1 else FailedRows.concat(parts)
    keys, n, mids, is_null = whole.key, whole.n, whole.mid, whole.null
    # rows ordered by group: non-null keys ascending, then the null key (often already so:
    # an orderBy of the keys after the aggregation)
    if is_null.any() or (keys[1:] < keys[:-1]).any():
        order = _group_order(keys, is_null)
        keys, n, mids, is_null = keys[order], n[order], mids[order], is_null[order]
    first = np.ones(keys.size, bool)
    first[1:] = (keys[1:] != keys[:-1]) | (is_null[1:] != is_null[:-1])
    start = np.flatnonzero(first)
    count = np.diff(np.append(start, keys.size))
    if not np.array_equal(np.repeat(n[start], count), n):
        msg = "rows of one group disagree on its count"
        raise TapFailed(msg)
    has_null = bool(is_null.any())
    distinct = keys[start[:-1] if has_null else start]
    return _FailedGroups(distinct, has_null, n[start], start, count, mids)


def _placed_by_key(parts: Sequence[FailedRows]) -> _FailedGroups | None:
    """The groups of failed rows whose non-null keys are ``lo, lo + 1, ...`` once each (the
    usual: an aggregation's output rows, its keys ids): each part's rows are scattered straight
    to their key's place, which is group order — no concatenation of the parts, no order
    computed and no gathers through it (at 10^7 rows ~1-2 s of fresh pages a slot). None when
    the rows are not so (a null key, a gap, a key twice)."""
    size = sum(p.key.size for p in parts)
    if not size or any(p.null.any() for p in parts):
        return None
    lo = min(int(p.key.min()) for p in parts if p.key.size)
    hi = max(int(p.key.max()) for p in parts if p.key.size)
    if hi - lo + 1 != size or lo == np.iinfo(np.int64).min:
        return None
    keys = np.full(size, lo - 1, np.int64)  # lo - 1: no key; a place left so breaks the order
    n = np.empty(size, np.int64)
    mids = np.empty(size, np.int64)
    for p in parts:
        at = p.key - lo
        keys[at] = p.key
        n[at] = p.n
        mids[at] = p.mid
    # every place written by its own key (a key twice leaves another's place unwritten)
    if int(keys[0]) != lo or not bool((keys[1:] > keys[:-1]).all()):
        return None
    return _FailedGroups(keys, False, n, np.arange(size), np.ones(size, np.int64), mids)


def _group_order(keys: np.ndarray, is_null: np.ndarray) -> np.ndarray:
    """The stable order of the rows by group: non-null keys ascending, then the null key. Keys
    dense in their range (ids as group keys, one row each) are placed by a scatter, which at
    10^7 rows takes ~0.1 s where the comparison sort takes ~1.5 s."""
    if keys.size and not is_null.any():
        lo = int(keys.min())
        span = int(keys.max()) - lo + 1
        if span <= 4 * keys.size:
            return stable_order(keys - lo, span)
    order: np.ndarray = np.lexsort((keys, is_null))
    return order


def tapped_ids(
    directory: str,
    staged: str,
    slot: RangeColumns,
    n_in: int,
    offsets: list[int],
    n_failed: int,
    threads: int | None = None,
    hashed: bool = False,
    rows: Sequence[FailedRows] | None = None,
) -> LineageTable:
    """The row lineage of the rows of the staged output (``staged``) whose range slot
    (summary columns ``slot``) failed its check, from the tap files in ``directory``.

    The tap runs with a local master only, so its files, like the staged output, are on this
    machine's disk, where the executors ran: they are read here, one file per thread (the
    numpy and ProvRC kernels release the GIL), and their pairs compressed by the native
    kernel's threads. No row of the pipeline is computed again or moved, and no Python
    worker is started for it.

    Raises:
        TapFailed: no stage's files account for the failed groups exactly (a map stage
            skipped or run on some partitions only, a file missing): the caller uses the
            join instead.

    ``rows`` are the failed rows when the pass already met them (recorded summaries; one part
    per staged file), which saves reading the staged output again.
    """
    stages: dict[str, list[str]] = {}
    for name in os.listdir(directory):
        if name.endswith(".bin"):
            stages.setdefault(name.split("-")[1], []).append(name)
    for names in stages.values():  # partition order (the output's rows come in it)
        names.sort(key=lambda n: (len(n), n))
    if not stages:
        msg = "no tap files"
        raise TapFailed(msg)
    if n_failed > MAX_GROUPS:
        msg = f"{n_failed} failed groups (more than {MAX_GROUPS})"
        raise TapFailed(msg)
    fg = _failed_groups(staged, slot, hashed, rows)
    if fg.rows.size != n_failed:
        msg = f"{fg.rows.size} failed rows in the staged output, {n_failed} counted"
        raise TapFailed(msg)
    # MID = partition << PART_BITS | index: the dense output row is the partition's offset
    # plus the index
    starts = np.asarray(offsets, np.int64)
    dense = np.take(starts, fg.rows >> PART_BITS)
    dense += fg.rows & ((1 << PART_BITS) - 1)
    index = KeyIndex(fg.keys)
    null_group = fg.keys.size if fg.has_null else -1

    counted = threading.Lock()

    def one(file: tuple[TapLayout, np.ndarray, np.ndarray]) -> _TappedFile:
        """The file's records of the failed groups (its ids read into the array given with
        its layout); its rows per group are added to the stage's counts given last."""
        layout, into, counts = file
        t = read_tap_records(layout, into)
        pos = index(t.seg_keys)
        if t.seg_null.any():
            pos[t.seg_null] = null_group
        hit = pos >= 0
        rows, ids = t.seg_rows, t.ids
        if not hit.all():
            ids = ids[np.repeat(hit, rows)]
            pos, rows = pos[hit], rows[hit]
        rpos = index(t.run_keys)
        rhit = rpos >= 0
        # one array for the stage, added to under a lock (~30 ms a file at 10^7 groups),
        # not one array a file summed after (each 80 MB of fresh pages, ~0.2-0.7 s here)
        with counted:
            np.add.at(counts, pos, rows)
            if rhit.any():
                np.add.at(counts, rpos[rhit], t.run_rows[rhit])
        return _TappedFile(pos, rows, ids, rpos[rhit], t.run_first[rhit], t.run_last[rhit])

    workers = max(1, min(max(map(len, stages.values())), threads or os.cpu_count() or 1))
    # the stage with the most files first (a complete one), the latest among equals
    order = sorted(stages, key=lambda st: (len(stages[st]), int(st)), reverse=True)
    for stage in order:
        layouts = [tap_layout(os.path.join(directory, n)) for n in stages[stage]]
        ends = np.cumsum([f.rows for f in layouts])
        # every file's ids, in the input row of one matrix of pairs (see _interval_table)
        pairs = np.empty((2, int(ends[-1])), np.int64)
        ids = pairs[1]
        starts = np.append(0, ends[:-1])
        # the output row's pages are first touched (zeroed; fill_repeated writes them later)
        # while the files are read: a first touch of huge-page-advised memory can cost ~1-3 s
        # a GB where the kernel compacts to find huge pages
        zeroed = _zero_behind(pairs[0])
        counts = np.zeros(fg.groups, np.int64)
        try:
            got = background.map_all(
                one,
                [
                    (f, ids[int(a) : int(b)], counts)
                    for f, a, b in zip(layouts, starts, ends, strict=True)
                ],
            )
        finally:
            zeroed()
        if np.array_equal(counts, fg.n):
            break
    else:
        msg = f"tapped rows do not match the groups' counts in any of {len(stages)} stage(s)"
        raise TapFailed(msg)
    return _interval_table(fg, dense, got, offsets[-1], n_in, workers, pairs, counts)


@dataclasses.dataclass(frozen=True)
class _TappedFile:
    """The failed groups' records of one tap file: single rows in key segments (``group``,
    ``rows``: the segment's group and its rows, their ``ids`` in order), runs (``run_group``,
    ``run_first``, ``run_last``: one id repeated when first == last)."""

    group: np.ndarray
    rows: np.ndarray
    ids: np.ndarray
    run_group: np.ndarray
    run_first: np.ndarray
    run_last: np.ndarray

    def segment_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Each segment's smallest and largest id (segments are never empty)."""
        if not self.ids.size:
            return self.ids, self.ids
        start = np.cumsum(self.rows) - self.rows
        return np.minimum.reduceat(self.ids, start), np.maximum.reduceat(self.ids, start)


def _interval_table(
    fg: _FailedGroups,
    dense: np.ndarray,
    files: list[_TappedFile],
    n_out: int,
    n_in: int,
    threads: int,
    pairs: np.ndarray | None = None,
    counts: np.ndarray | None = None,
) -> LineageTable:
    """The lineage of the failed groups' output rows from their tapped intervals of ids
    (single rows are intervals of one id; ``counts``, when given, the rows each group
    received).

    A group whose intervals all start at one id, or all end at one (its rows streamed
    clustered by id: a run; or one joined row repeated for each of its matches, wherever they
    streamed), unites into one interval and goes to ProvRC as that interval
    (:func:`~dslog_dagster.core.compression.compress_ranges`, no pairs spelled out); the other
    groups' single rows and runs are spelled out as pairs and compressed (repeats are
    united: lineage is a set). A group on several output rows (a step after the aggregation
    repeated it) gives its ids to each of them.

    The files are never concatenated: at 10^8 tapped rows every full-size copy is ~0.3-2.5 s
    of fresh pages. ``pairs``, when given, is the ``(2, n)`` matrix whose input row the files'
    ids were read into: when every single row is spelled out (every group's rows spelled,
    no run), the output rows are written into its other row and it goes to ProvRC as it is
    (:func:`~dslog_dagster.core.compression.compress_grouped`: sorted in place when the
    output rows come in order, as an aggregation over sorted rows writes them, and kept as
    the columnar table without a copy). Otherwise the pairs are gathered into new arrays.
    ``files`` is emptied once its pairs are spelled out, so their arrays are freed before
    ProvRC sorts a copy of the pairs.
    """
    if counts is not None and not any(f.run_group.size for f in files):
        has, same, lo_min, hi_max = _single_row_groups(files, counts)
    else:
        has, same, lo_min, hi_max = _united_intervals(fg.groups, files)
    tables = []
    one = np.flatnonzero(same)
    if one.size:
        rows, at = _group_rows(fg, dense, one)
        lo1, hi1 = lo_min[one], hi_max[one]
        if at is not None:
            lo1, hi1 = lo1[at], hi1[at]
        if np.array_equal(lo1, hi1):
            # one id per group (a joined row repeated for its matches): the intervals are
            # the pairs, and ProvRC takes them as they are; compress_ranges would build its
            # plateau table first and, at one pair per row, drop it for the same call (3.5 s
            # against 0.3 s for the bench's 10^7 dims rows)
            rel = LineageRelation.from_columns((n_out,), (n_in,), [rows], [lo1], copy=False)
            tables.append(compress(rel, threads=threads))
        else:
            tables.append(compress_ranges((n_out,), (n_in,), rows, lo1, hi1, threads=threads))
    spell = has & ~same
    if spell.any():
        many = None if not one.size else spell  # None: every group with records

        def spelled(f: _TappedFile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            """The file's segments (group, rows) and ids of the groups spelled out, its runs
            spelled out as segments of one row."""
            g, rows, ids = f.group, f.rows, f.ids
            if many is not None:
                keep = many[g]
                if not keep.all():
                    g, rows, ids = g[keep], rows[keep], ids[np.repeat(keep, rows)]
            if f.run_group.size:
                rg, first, last = f.run_group, f.run_first, f.run_last
                if many is not None:
                    keep = many[rg]
                    rg, first, last = rg[keep], first[keep], last[keep]
                # a repeated id (first == last): one pair (lineage is a set)
                run_g, run_ids = expand_ranges(rg, first, last)
                g, ids = np.concatenate([g, run_g]), np.concatenate([ids, run_ids])
                rows = np.concatenate([rows, np.ones(run_g.size, np.int64)])
            return g, rows, ids

        parts = background.map_all(spelled, files)
        files.clear()  # the caller's list: its arrays now live in `parts` only
        if pairs is not None and (fg.count == 1).all() and covers([i for *_, i in parts], pairs[1]):
            # every id already in place: the output rows written beside them, no copy
            groups = np.concatenate([g for g, _, _ in parts])
            rows = np.concatenate([r for _, r, _ in parts])
            del parts
            fill_repeated(pairs[0], fg.first_rows(dense)[groups], rows)
            tables.append(compress_grouped((n_out,), (n_in,), pairs, threads=threads))
            return union_tables(tables)
        out_rows, in_rows = _pair_rows(fg, dense, parts)
        del parts  # before ProvRC sorts a copy of the pairs (1.6 GB each at 10^8 pairs)
        # a row repeated in the aggregation's input gives one pair twice: compress takes sets
        rel = LineageRelation.from_columns((n_out,), (n_in,), [out_rows], [in_rows], copy=False)
        tables.append(compress(rel, threads=threads))
    if not tables:  # no group has ids
        return compress_ranges((n_out,), (n_in,), one, one, one)
    return union_tables(tables)


def _united_intervals(
    groups: int, files: list[_TappedFile]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group: whether it has records, whether its intervals unite into one (they all
    start at one id, or all end at one), and the united interval's ``lo`` and ``hi``."""
    lo_min = np.full(groups, np.iinfo(np.int64).max, np.int64)
    lo_max = np.full(groups, -1, np.int64)  # ids are >= 0: -1 = the group has no records
    for f in files:  # single rows: lo = hi = id, per segment first
        seg_min, seg_max = f.segment_bounds()
        np.minimum.at(lo_min, f.group, seg_min)
        np.maximum.at(lo_max, f.group, seg_max)
    hi_min, hi_max = lo_min, lo_max
    if any(f.run_group.size for f in files):
        hi_min, hi_max = lo_min.copy(), lo_max.copy()
        for f in files:
            np.minimum.at(lo_min, f.run_group, f.run_first)
            np.maximum.at(lo_max, f.run_group, f.run_first)
            np.minimum.at(hi_min, f.run_group, f.run_last)
            np.maximum.at(hi_max, f.run_group, f.run_last)
    has = lo_max >= 0
    # intervals that all start at one id, or all end at one, unite into [lo_min, hi_max]
    same = has & ((lo_min == lo_max) | (hi_min == hi_max))
    return has, same, lo_min, hi_max


def _single_row_groups(
    files: list[_TappedFile], counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_united_intervals` when the files hold single rows only (no run): a group of
    one row is the interval of its id, any other is spelled out. No per-segment minimum and
    maximum over every id (~1.2 s at 10^8 rows): the tap writes consecutive rows of one key
    and one id as a run, so several single rows of a group hold more than one id, and where
    they do not, spelling them out unites them the same (lineage is a set)."""
    has = counts > 0
    same = counts == 1
    lo = np.zeros(0, np.int64)
    if same.any():
        lo = np.zeros(counts.size, np.int64)
        for f in files:
            single = f.rows == 1
            if single.any():
                start = np.cumsum(f.rows) - f.rows
                lo[f.group[single]] = f.ids[start[single]]
    return has, same, lo, lo


def _pair_rows(
    fg: _FailedGroups,
    dense: np.ndarray,
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """The (output row, input row) pairs of the key segments ``parts`` (per part: each
    segment's group and rows, and the segments' ids in order), in new arrays: a segment's
    output row is looked up once and repeated for its rows."""
    if not (fg.count == 1).all():  # a group on several rows: rare, one entry per row
        groups = [np.repeat(g, r) for g, r, _ in parts]
        spelled = [_group_rows(fg, dense, g) for g in groups]
        rows = np.concatenate([r for r, _ in spelled])
        ids = np.concatenate(
            [i if at is None else i[at] for (_, _, i), (_, at) in zip(parts, spelled, strict=True)]
        )
        return rows, ids
    row_of = fg.first_rows(dense)  # each group's one output row
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    seg_groups = np.concatenate([g for g, _, _ in parts])
    out_rows = np.repeat(row_of[seg_groups], np.concatenate([r for _, r, _ in parts]))
    in_parts = [i for _, _, i in parts]
    return out_rows, in_parts[0] if len(in_parts) == 1 else np.concatenate(in_parts)


def covers(parts: Sequence[np.ndarray], whole: np.ndarray) -> bool:
    """Whether ``parts`` are consecutive slices of ``whole`` (1-D, contiguous) that cover
    it, in order: the array the parts were read into, untouched since."""
    at = whole.ctypes.data
    for p in parts:
        if p.ndim != 1 or p.dtype != whole.dtype or not p.flags.c_contiguous:
            return False
        if p.size and p.ctypes.data != at:
            return False
        at += p.nbytes
    return whole.ndim == 1 and whole.flags.c_contiguous and at == whole.ctypes.data + whole.nbytes


def _zero_behind(a: np.ndarray) -> Callable[[], None]:
    """Starts zeroing ``a`` in a worker (here when called from one, which must not wait on
    the pool); the function returned waits until it is done."""
    if background.in_worker():
        a.fill(0)
        return lambda: None
    future = background.submit(a.fill, 0)
    return lambda: future.result()


def fill_repeated(out: np.ndarray, values: np.ndarray, counts: np.ndarray) -> None:
    """``out[:] = np.repeat(values, counts)`` (``counts`` all positive, adding up to
    ``out.size``; ``out`` 1-D C-contiguous int64) in one native pass, without the temporary
    array ``np.repeat`` makes (or the steps and cumulative sum that took ~0.7 s at 10^8).

    Raises:
        ValueError: a count is not positive or they do not add up (the kernel checks).
    """
    kernels.repeat_into(
        out, values.astype(np.int64, copy=False), counts.astype(np.int64, copy=False)
    )


def _group_rows(
    fg: _FailedGroups, dense: np.ndarray, g: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """The dense output rows of groups ``g`` (a group on several rows: one entry per row) and
    for each, its index in ``g`` (None when every group is on one row: entry ``i`` is
    ``g[i]``'s)."""
    if (fg.count == 1).all():
        return fg.first_rows(dense)[g], None
    first = fg.start[g]
    at, pos = expand_ranges(np.arange(g.size), first, first + fg.count[g] - 1)
    return dense[pos], at
