"""The capture policy and lineage mode of tracked steps, as ``str`` enums.

Their member names equal their values: Dagster's config schema offers an enum's member *names*
(launchpad YAML ``policy: capture``), and pydantic and ``==`` accept the values
(``policy="capture"`` in Python), so every spelling users wrote against the former ``Literal``
types still works. Dagster names a config enum after its class, and the names of every config
type in a code location must be unique, hence these specific names (a user's own ``Policy``
enum would clash with a bare one). This module does not import Dagster: the engine-side hand-off
(:mod:`dslog_dagster.tracking`, :mod:`dslog_dagster.tracked_step`) uses the enums too.
"""

import enum

__all__ = ["CapturePolicy", "LineageMode"]


class CapturePolicy(enum.StrEnum):
    """Per-step capture policy.

    * ``capture`` — run the step under the annotator; a step whose lineage would be lost fails
      with :class:`~dslog_dagster.errors.LineageLostError`.
    * ``all_to_all`` — like ``capture``, but where lineage would be lost record the explicit
      all-to-all relation instead (an over-approximation), flagged in the metadata.
    * ``reuse_only`` — never annotate; take lineage from a confirmed reuse view only. Without
      one the step runs unchanged and records **no** lineage, and ``dslog/record`` says so.
    * ``on_demand`` — run the step unchanged; record its input and output versions and how to
      re-run it, and capture its lineage only when a query needs it (PROVision): the query
      re-runs the step under capture on the recorded inputs, checks it gives the stored
      output, and keeps the lineage (:mod:`dslog_dagster.core.on_demand`). NumPy steps.
    * ``off`` — run the step unchanged and record nothing.
    """

    # lower-case names: Dagster's launchpad config takes the member names (see module docstring)
    capture = "capture"
    reuse_only = "reuse_only"
    off = "off"
    all_to_all = "all_to_all"
    on_demand = "on_demand"


class LineageMode(enum.StrEnum):
    """Lineage of picks (max, sort, where, clip...).

    * ``contributing`` — a picked value depends on the picked cell only;
    * ``considered`` — also on every compared cell.
    """

    contributing = "contributing"
    considered = "considered"
