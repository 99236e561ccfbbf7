"""Range summaries recorded where an aggregation finishes its groups.

A range slot (:meth:`~dslog_dagster.spark.frame.TrackedGroupedData._range_agg`) summarises the
ids of each group as ``lo``, ``hi``, ``ok`` and the count ``n``. Carried as columns, the three
besides ``lo`` travel with every row through the steps after the aggregation — the shuffle
and sort of an ``orderBy``, the Parquet writer — which made them the largest intrinsic cost
of a capture at 10^6 rows (in plain PySpark, the bench pipeline with them carried took 1.34×
the plain one, with one column in their place 1.19×).

With the id tap's class in the session (a local master; :mod:`~dslog_dagster.spark.idtap`),
the aggregation instead computes ``lo`` as ``summary(token, key, key_is_null, lo, hi, ok, n)``:
a nondeterministic JVM function over the aggregate functions that returns ``lo`` and records
the group's summary, keyed by the group's one integral key or the hash of its keys, into
files ``sum-<stage>-<partition>.bin`` of the token's directory (format in ``IdTap.java``).
The rows keep ``lo`` and the group key (which the aggregation outputs anyway, for the tap);
the capture reads the rest back here and looks each row's group up by its key.

The lookup is exact or it fails, never a guess:

* every output row with ids (``lo`` set) must find its key, and a key recorded twice must
  carry the same summary both times (a stage run twice — an ``orderBy`` samples its input —
  records the same groups; two groups whose keys hash alike record different ones);
* otherwise :class:`SummariesMissing` is raised and the capture runs again with the summaries
  carried as columns.
"""

import os
from dataclasses import dataclass

import numpy as np

__all__ = ["GroupSummaries", "SummariesMissing", "read_summaries"]


class SummariesMissing(Exception):
    """The recorded summaries do not give every row's group exactly one summary."""


def _read_file(path: str) -> list[np.ndarray]:
    """One summary file: columns keys, lo, hi, n, flags (chunks concatenated)."""
    a = np.fromfile(path, dtype="<i8")
    cols: list[list[np.ndarray]] = [[] for _ in range(5)]
    at = 0
    while at < a.size:
        c = int(a[at])
        if c < 0 or at + 1 + 5 * c > a.size:
            msg = f"summary file {path} is truncated (a chunk of {c} groups at value {at})"
            raise SummariesMissing(msg)
        for i in range(5):
            cols[i].append(a[at + 1 + i * c : at + 1 + (i + 1) * c])
        at += 1 + 5 * c
    return [np.concatenate(c) if c else np.zeros(0, np.int64) for c in cols]


@dataclass(frozen=True)
class GroupSummaries:
    """The distinct recorded summaries of one range slot, sorted by (key is null, key)."""

    keys: np.ndarray  # int64; 0 for the null key
    null: np.ndarray  # bool
    lo: np.ndarray
    hi: np.ndarray
    ok: np.ndarray  # bool
    n: np.ndarray

    def lookup(self, key: np.ndarray, null: np.ndarray) -> np.ndarray:
        """Index of each row's group (``key``, ``null`` per row, for rows with ids).

        Raises:
            SummariesMissing: some row's group was not recorded.
        """
        # sorted by (null, key): null-key groups (key 0) come after all others
        probe = np.where(null, 0, key)
        pos = np.zeros(probe.shape, np.int64)
        n_plain = int((~self.null).sum())
        plain = ~null
        if plain.any():
            p = np.searchsorted(self.keys[:n_plain], probe[plain])
            p[p >= n_plain] = max(n_plain - 1, 0)
            if n_plain == 0 or not np.array_equal(self.keys[p], probe[plain]):
                msg = "a row's group key has no recorded summary"
                raise SummariesMissing(msg)
            pos[plain] = p
        if null.any():
            if n_plain == self.keys.size:
                msg = "the null group key has no recorded summary"
                raise SummariesMissing(msg)
            pos[null] = n_plain
        return pos


def read_summaries(directory: str) -> GroupSummaries:
    """All summaries recorded in ``directory``, one per group.

    Raises:
        SummariesMissing: a file is truncated, or one key was recorded with two different
            summaries (two groups whose keys hash alike).
    """
    names = sorted(n for n in os.listdir(directory) if n.startswith("sum-") and n.endswith(".bin"))
    parts = [_read_file(os.path.join(directory, n)) for n in names]
    if parts:
        keys, lo, hi, n, flags = (np.concatenate([p[i] for p in parts]) for i in range(5))
    else:
        keys = lo = hi = n = flags = np.zeros(0, np.int64)
    null = (flags & 1).astype(bool)
    keys = np.where(null, 0, keys)
    ok = (flags & 2).astype(bool)
    # sorted by (null, key); a key recorded twice must carry one summary
    order = np.lexsort((keys, null))
    keys, null, lo, hi, ok, n = (a[order] for a in (keys, null, lo, hi, ok, n))
    again = np.zeros(keys.size, bool)
    again[1:] = (keys[1:] == keys[:-1]) & (null[1:] == null[:-1])
    if again.any():
        prev = np.flatnonzero(again) - 1
        cur = np.flatnonzero(again)
        if not all(np.array_equal(a[cur], a[prev]) for a in (lo, hi, ok, n)):
            msg = "two groups' keys hash alike (one key, two summaries)"
            raise SummariesMissing(msg)
        keep = ~again
        keys, null, lo, hi, ok, n = (a[keep] for a in (keys, null, lo, hi, ok, n))
    return GroupSummaries(keys=keys, null=null, lo=lo, hi=hi, ok=ok, n=n)
