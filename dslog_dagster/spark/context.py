"""The state one capture shares between its tracked frames, and what it learns on the way.

Every :class:`~dslog_dagster.spark.state.FrameState` of one capture points at one
:class:`CaptureContext`: it hands out slot ids (and remembers which input each slot belongs to),
keeps the options the capture runs with (``on_unknown``, how aggregations carry ids, the id
tap's directory) and collects what the lineage rules leave for the capture's pass: the steps
recorded all-to-all, and for every range slot its summary's fields and where its ids can be
found again.
"""

import itertools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pyspark.sql import Column, DataFrame

__all__ = ["CaptureContext", "NeedLists", "OnUnknown", "RangeFields", "RangeSource"]

OnUnknown = Literal["raise", "all_to_all"]


@dataclass
class CaptureContext:
    """State shared by the frames of one capture: slot ids and which input each belongs to."""

    on_unknown: OnUnknown = "raise"
    slot_input: dict[int, int] = field(default_factory=dict)
    counter: Iterable[int] = field(default_factory=itertools.count)
    flagged_ops: list[str] = field(default_factory=list)
    aggregate: Literal["ranges", "lists"] = "ranges"
    # range slot -> where its ids come from: the aggregation's input frame, its group keys
    # and the slot's column there (see dslog_dagster.spark.ranges: rows whose range check
    # fails get their ids by joining that frame with their group key, not by a rerun)
    range_src: dict[int, "RangeSource"] = field(default_factory=dict)
    # range slot -> the slots of its hi, ok, n and its aggregation's keys (spark.ranges)
    range_fields: dict[int, "RangeFields"] = field(default_factory=dict)
    # directory under which range slots with tappable keys record their group's ids as
    # the aggregation's map side streams them (see dslog_dagster.spark.idtap); None: no tap
    tap_root: str | None = None
    # the tapped slots' directories; a slot's token is its index (see idtap.tap_column)
    tap_dirs: list[str] = field(default_factory=list)
    # tapped aggregations take every group's ids from the tap and record each group's id
    # count, computing no range (see dslog_dagster.spark.summaries); False: ranges carried as
    # columns (the rerun when the recorded summaries or the tap cannot be used)
    record_summaries: bool = True
    # the pass collects a small output into this process instead of staging it (see
    # capture_frame_outputs(collect=True))
    collect: bool = False
    # the steps recorded so far with their DPDS kinds (dslog_dagster.spark.kinds), the calls
    # running now, and the plan nodes and computed columns the current call's walks met
    steps: list[Any] = field(default_factory=list)
    depth: int = 0
    plan_nodes: list[str] = field(default_factory=list)
    computed: set[str] = field(default_factory=set)

    def new_tap_dir(self, kind: str) -> tuple[int, str]:
        """A token and its directory under ``tap_root`` for one JVM recorder (``"t"``: an id
        tap, ``"s"``: range summaries); jobs of the capture's pass name it by the token."""
        assert self.tap_root is not None
        token = len(self.tap_dirs)
        path = os.path.join(self.tap_root, f"{kind}{token}")
        os.makedirs(path)
        self.tap_dirs.append(path)
        return token, path

    def new_slot(self, input_index: int) -> int:
        """A new slot id, whose row ids name rows of input ``input_index``."""
        sid = next(iter(self.counter))
        self.slot_input[sid] = input_index
        return sid


@dataclass(frozen=True)
class RangeFields:
    """Where a range slot's summary lives besides its own column (``lo``): the slots holding
    its ``hi``, ``ok`` and ``n``, and the aggregation's group keys and their hash (shared by
    the slots of one aggregation; none when the keys cannot be stored). With ``summary`` (a
    directory) there are no ``hi``, ``ok`` and ``n`` slots: the aggregation recorded them
    there per group (:mod:`~dslog_dagster.spark.summaries`)."""

    hi: int | None
    ok: int | None
    n: int | None
    keys: tuple[int, ...] = ()
    hash: int | None = None
    summary: str | None = None

    def remap(self, ren: Mapping[int, int]) -> "RangeFields":
        def m(s: int | None) -> int | None:
            return None if s is None else ren.get(s, s)

        return RangeFields(
            m(self.hi),
            m(self.ok),
            m(self.n),
            tuple(ren.get(k, k) for k in self.keys),
            m(self.hash),
            self.summary,
        )


@dataclass(frozen=True)
class RangeSource:
    """How to find the ids of a range slot's group again: the rows of ``frame`` (the
    aggregation's input) whose group keys ``keys`` equal, null-safely, the group keys the
    aggregation output (:attr:`RangeFields.keys`), in column ``slot`` of ``frame``."""

    frame: DataFrame
    keys: tuple[Column, ...]
    slot: str
    tap: str | None = None  # the slot's tap directory (dslog_dagster.spark.idtap), if tapped
    hashed: bool = False  # the tap recorded the keys' hash (RangeFields.hash), not the key


class NeedLists(Exception):
    """Raised inside a capture in ``ranges`` mode when a step needs the aggregated slots as
    lists (e.g. an aggregation over an aggregation); the capture reruns in ``lists`` mode."""
