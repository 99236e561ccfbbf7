"""The id tap: which input rows fell into which group, recorded where the rows stream.

An aggregation's lineage is "output row ``o`` ← every input row of its group". The capture
summarises each group's ids as a range in the aggregation itself (cheap hash aggregates,
exact when the keys are clustered by row id); when they are not (shuffled keys), the ids
have to be found again. Joining the aggregation's input with the failed groups' keys costs
a second computation of that input, a join and a JVM → Python transfer of every id — about
as much as the step itself at 10^6 rows.

The tap avoids all three. ``tap(dir, key, id)`` is a small JVM function
(``jvm/IdTap.java``; a nondeterministic Spark SQL UDF, so the optimizer neither drops,
duplicates nor moves it) placed under the aggregation: it returns ``id`` and remembers
``(key, id)`` for the running task, which writes them to one binary file per map partition
when it succeeds. The capture then reads the files (on the driver's disk: a local master's
executors run in the driver's JVM), matches their keys with the failed groups' keys and
compresses the pairs (:func:`tapped_ids`). This is Titian's capture at the stage boundary,
made exact, checked and persisted:

* only for a local master (the files are on the driver's disk) and one integral group key
  (compared as ``bigint``: equal keys, equal groups; a null key is its own group);
* every failed group must receive exactly as many tapped rows as its ``count(id)`` in the
  aggregation, and all files must come from one stage (a retried task replaces its
  partition's file; a map stage skipped or run twice would not match); otherwise the capture
  falls back to the join (:func:`~dslog_dagster.spark.lineage.refetch_ids`), which is always
  exact.

The JVM class is compiled once per machine and PySpark version with ``javac`` (a JDK; ~2 s)
and cached under ``$XDG_CACHE_HOME/dslog-dagster/jvm``; :func:`~dslog_dagster.spark.session.
get_session` puts it on the session's class path. Without ``javac``, or in a session started
elsewhere, the capture uses the join.
"""

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from dslog_dagster.core.provrc import LineageTable, compress
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.spark.rowid import MID, PART_BITS

__all__ = [
    "FUNCTION",
    "INTEGRAL",
    "TapFailed",
    "read_tap",
    "tap_column",
    "tap_jar",
    "tap_ready",
    "tapped_ids",
]

log = logging.getLogger(__name__)

FUNCTION = "__dslog_id_tap"
"""The tap's name in a session's function registry."""

CLASS = "dslog.spark.IdTap"

INTEGRAL = ("tinyint", "smallint", "int", "bigint")
"""Key types the tap compares exactly as ``bigint``."""

MAX_GROUPS = 20_000_000
"""Failed groups above this are found by the join: every tap task holds their keys."""

_SPARK_JARS = ("spark-core_", "spark-sql-api_", "spark-sql_", "spark-catalyst_", "scala-")


class TapFailed(Exception):
    """The tapped rows do not account for the failed groups exactly (see module docstring)."""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dslog-dagster" / "jvm"


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    return shutil.which("javac")


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
    javac = _javac()
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
    """Whether the session can run the tap here: a local master and the class loaded in the
    driver (registers :data:`FUNCTION`; one JVM call)."""
    if not str(spark.sparkContext.master).startswith("local"):
        return False
    session = spark._jsparkSession
    key = (id(spark.sparkContext), str(session.toString()))
    if key not in _REGISTERED:
        try:
            spark._jvm.dslog.spark.IdTap.register(session, FUNCTION)  # type: ignore[union-attr]
        except Exception:  # py4j: the class is not on this session's class path
            return False
        _REGISTERED.add(key)
    return True


_REGISTERED: set[tuple[int, str]] = set()
"""Sessions (by SparkContext and JVM session object) with :data:`FUNCTION` registered."""


def tap_column(directory: str, key: Column, ids: Column) -> Column:
    """``ids``, recording ``(key, id)`` per row into ``directory`` (see the module)."""
    return F.call_udf(FUNCTION, F.lit(directory), key.cast("bigint"), ids)


def read_tap(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One tap file: keys, ids and whether the key was null (``~id`` stored)."""
    a = np.fromfile(path, dtype="<i8")
    n = int(a[0]) if a.size else 0
    if a.size != 1 + 2 * n:
        msg = f"Tap file {path} is truncated ({a.size} values for {n} pairs)."
        raise TapFailed(msg)
    keys, ids = a[1 : 1 + n], a[1 + n :]
    null = ids < 0
    return keys, np.where(null, ~ids, ids), null


def _failed_groups(staged: str, slot: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """The groups whose range check failed, from the staged output: their keys (sorted),
    ``MID`` and id counts in that order, and the ``MID`` and count of the null-key group
    (-1, 0 when there is none)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(staged, columns=[MID, slot])
    s = t.column(slot).combine_chunks()
    lo = pc.struct_field(s, "lo")
    ok = pc.fill_null(pc.struct_field(s, "ok"), True)
    bad = pc.and_(lo.is_valid(), pc.invert(ok))
    mids = t.column(MID).combine_chunks().filter(bad).to_numpy().astype(np.int64)
    key = pc.struct_field(pc.struct_field(s, "k"), "k0").filter(bad)
    n = pc.struct_field(s, "n").filter(bad).to_numpy(zero_copy_only=False).astype(np.int64)
    is_null = np.asarray(key.is_null().to_numpy(zero_copy_only=False), bool)
    keys = pc.fill_null(key.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    null_mid, null_n = -1, 0
    if is_null.any():
        i = int(np.flatnonzero(is_null)[0])
        null_mid, null_n = int(mids[i]), int(n[i])
    keep = ~is_null
    keys, mids, n = keys[keep], mids[keep], n[keep]
    order = np.argsort(keys, kind="stable")
    return keys[order], mids[order], n[order], null_mid, null_n


class _KeyIndex:
    """Position of each key among sorted, distinct keys (-1 when absent): a direct table when
    the keys are dense enough (group keys are often ids), else a binary search."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys
        self.lo = int(keys[0]) if keys.size else 0
        span = int(keys[-1]) - self.lo + 1 if keys.size else 0
        self.table: np.ndarray | None = None
        if keys.size and span <= 8 * keys.size + 4096:
            self.table = np.full(span, -1, np.int64)
            self.table[keys - self.lo] = np.arange(keys.size, dtype=np.int64)

    def __call__(self, k: np.ndarray) -> np.ndarray:
        if not self.keys.size:
            return np.full(k.shape, -1, np.int64)
        if self.table is not None:
            off = k - self.lo
            inside = (off >= 0) & (off < self.table.size)
            pos = np.full(k.shape, -1, np.int64)
            pos[inside] = self.table[off[inside]]
            return pos
        pos = np.searchsorted(self.keys, k)
        pos[pos >= self.keys.size] = 0
        return np.where(self.keys[pos] == k, pos, -1)


def tapped_ids(
    directory: str,
    staged: str,
    slot: str,
    n_in: int,
    offsets: list[int],
    n_failed: int,
    threads: int | None = None,
) -> LineageTable:
    """The row lineage of the rows of the staged output (``staged``) whose range slot
    ``slot`` failed its check, from the tap files in ``directory``.

    The tap runs with a local master only, so its files, like the staged output, are on this
    machine's disk, where the executors ran: they are read here, one file per thread (the
    numpy and ProvRC kernels release the GIL), and their pairs compressed by the native
    kernel's threads. No row of the pipeline is computed again or moved, and no Python
    worker is started for it.

    Raises:
        TapFailed: the files do not account for the failed groups exactly (a map stage
            skipped, run twice or a file missing): the caller uses the join instead.
    """
    names = sorted(n for n in os.listdir(directory) if n.endswith(".bin"))
    if not names:
        msg = "no tap files"
        raise TapFailed(msg)
    if len({n.split("-")[1] for n in names}) != 1:
        msg = "tap files from more than one stage"
        raise TapFailed(msg)
    if n_failed > MAX_GROUPS:
        msg = f"{n_failed} failed groups (more than {MAX_GROUPS})"
        raise TapFailed(msg)
    keys, mids, expected, null_mid, null_n = _failed_groups(staged, slot)
    if expected.size + (1 if null_mid >= 0 else 0) != n_failed:
        msg = f"{expected.size} failed groups in the staged output, {n_failed} counted"
        raise TapFailed(msg)
    # MID = partition << PART_BITS | index: the dense output row is the partition's offset
    # plus the index
    starts = np.asarray(offsets, np.int64)
    dense = starts[mids >> PART_BITS] + (mids & ((1 << PART_BITS) - 1))
    null_o = -1
    if null_mid >= 0:
        null_o = int(starts[null_mid >> PART_BITS] + (null_mid & ((1 << PART_BITS) - 1)))
    index = _KeyIndex(keys)

    def one(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        k, r, null = read_tap(path)
        pos = index(k[~null])
        hit = pos >= 0
        o, ids = dense[pos[hit]], r[~null][hit]
        counts = np.bincount(pos[hit], minlength=keys.size)
        n_null = 0
        if null_mid >= 0 and null.any():
            n_null = int(null.sum())
            o = np.concatenate([o, np.full(n_null, null_o, np.int64)])
            ids = np.concatenate([ids, r[null]])
        return o, ids, counts, n_null

    workers = max(1, min(len(names), threads or os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        got = list(pool.map(one, [os.path.join(directory, n) for n in names]))
    counts = np.sum([g[2] for g in got], axis=0) if got else np.zeros(0, np.int64)
    if not np.array_equal(counts, expected) or sum(g[3] for g in got) != null_n:
        msg = "tapped rows do not match the groups' counts"
        raise TapFailed(msg)
    o = np.concatenate([g[0] for g in got])
    r = np.concatenate([g[1] for g in got])
    # a row repeated in the aggregation's input gives one pair twice: compress takes sets
    rel = LineageRelation.from_columns((offsets[-1],), (n_in,), [o], [r])
    return compress(rel, threads=workers)
