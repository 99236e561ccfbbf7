"""Materialization metadata of tracked assets: the ``dslog/...`` keys and how they are built.

Every ``dslog/...`` key the plugin writes is a constant here — the tracked outputs' keys
below, and those of the query assets, the reuse-signatures asset, the lineage checks and the
run tags of the automation — so the assets, checks and tests use the same strings.

A tracked output carries at most five ``dslog/...`` entries, few on purpose: Dagster
serializes, stores and reads back every entry of every materialization (twice: in the
materialization and the handled-output event), 40-80 us per entry, which was a tenth of a step
served from a reuse view with the 17 entries of earlier versions. Numbers are formatted for a
reader (``50,210×``, ``4.2 MB``, seconds to 2 significant digits); programs read the exact
figures from the store by ``dslog/op_id``.

=====================  =========================================================================
key                    value
=====================  =========================================================================
``dslog/shape``        the stored value's shape (a DataFrame: ``(rows, columns)``), written by
                       the IO manager; the lineage checks read it
``dslog/obtained``     how lineage was obtained: ``captured`` (annotator), ``all-to-all`` (lost
                       lineage replaced by an all-to-all relation: flagged, the record says
                       why), ``base``/``dim``/``gen`` (a reuse view), ``source`` (no tracked
                       inputs: only the array version is registered), ``off``/``none`` (nothing
                       recorded: policy off, or reuse_only without a view)
``dslog/op_id``        the registered operation: everything the store recorded (array name and
                       version, operation, inputs and their versions, arguments, the tables) is
                       ``LineageStore.get_operation(op_id)``
``dslog/record``       markdown: what was stored (array and version, operation, inputs and their
                       versions) and one summary table with units: lineage pairs and their raw
                       bytes, stored rows and bytes, the compression ratio, capture and write
                       seconds and their share of the step, the reuse signature, the store
                       (relative to the value directory, never an absolute path); a sentence
                       when there is something to say (why nothing was recorded, a flag)
``dslog/lineage``      markdown: the output's data as a heat map with its most informative cells
                       (the hottest) in distinct colours, and each input with the cells feeding
                       each of them in the same colour (:mod:`dslog_dagster.pictures`)
=====================  =========================================================================

With an OpenLineage transport configured (``DSLogResource(openlineage=...)``), a tracked
output also gets ``dslog/openlineage``: how many of its run events were sent, and the first
failure (:mod:`dslog_dagster.export.openlineage_emit`).

DataFrame assets (Spark steps) also get Dagster's own keys: ``dagster/column_lineage`` (per
output column, the upstream asset columns its values came from, from the capture's analyzed
plan), ``dagster/column_schema`` and ``dagster/row_count``.
"""

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import BaseModel, ConfigDict

from dslog_dagster.io_managers.lineage_picture import (
    clear_picture_cache,
    lineage_markdown,
    sample_cells,
)

__all__ = [
    "ALL_TO_ALL",
    "CHECK_ARRAY",
    "CHECK_CELLS",
    "CHECK_CELLS_WITHOUT_LINEAGE",
    "CHECK_CELLS_WITH_LINEAGE",
    "CHECK_CONSTANT_BOXES",
    "CHECK_CONSTANT_CELLS_DECLARED",
    "CHECK_ERRORS",
    "CHECK_OPERATIONS",
    "CHECK_PAIRS",
    "CHECK_PROBLEMS",
    "CHECK_SHAPE_SOURCE",
    "CHECK_STORE_SHAPE",
    "CHECK_TABLES",
    "CHECK_UNCOVERED_PICTURE",
    "CHECK_UNCOVERED_PREVIEW",
    "CHECK_VERSION",
    "COLUMN_LINEAGE",
    "COLUMN_SCHEMA",
    "CONSTANT_CELLS",
    "LINEAGE",
    "OBTAINED",
    "OPENLINEAGE",
    "OP_ID",
    "QUERY_JSON",
    "RECORD",
    "RESULT_BOXES",
    "RESULT_CELLS",
    "RESULT_PATH",
    "RESULT_PICTURE",
    "RESULT_PREVIEW",
    "ROW_COUNT",
    "SAVED_QUERY_TAG",
    "SHAPE",
    "SOURCE_PICTURE",
    "TARGET_SHAPE",
    "UPSTREAM_STORAGE_ID_TAG",
    "VIEWS_BY_KIND",
    "VIEWS_TABLE",
    "VIEW_COUNT",
    "VIEW_HITS",
    "LineageMetadata",
    "clear_picture_cache",
    "column_lineage",
    "format_bytes",
    "format_ratio",
    "format_seconds",
    "lineage_markdown",
    "record_figures",
    "sample_cells",
]

# ------------------------------------------------------------------ tracked outputs
OBTAINED = "dslog/obtained"
OP_ID = "dslog/op_id"
LINEAGE = "dslog/lineage"
RECORD = "dslog/record"
#: the stored value's shape (a DataFrame: ``(rows, columns)``); the shape check reads it as a
#: JSON list or text such as ``(4, 5)``
SHAPE = "dslog/shape"
#: user metadata declaring cells without lineage on purpose (JSON box strings), read by the
#: coverage check
CONSTANT_CELLS = "dslog/constant_cells"
#: ``dslog/obtained`` of a flagged output: an all-to-all relation stands in for lost lineage
ALL_TO_ALL = "all-to-all"
#: how the materialization's OpenLineage events went (``2 events sent``, ``0 of 2 events sent:
#: <error>``); only when the resource's ``openlineage.transport`` is on
OPENLINEAGE = "dslog/openlineage"
# Dagster's own keys that the plugin fills
COLUMN_LINEAGE = "dagster/column_lineage"
COLUMN_SCHEMA = "dagster/column_schema"
ROW_COUNT = "dagster/row_count"

# ------------------------------------------------------------------ query assets
QUERY_JSON = "dslog/query"
RESULT_CELLS = "dslog/result_cells"
RESULT_BOXES = "dslog/result_boxes"
RESULT_PATH = "dslog/result_path"
RESULT_PREVIEW = "dslog/result_preview"
RESULT_PICTURE = "dslog/result_picture"
SOURCE_PICTURE = "dslog/source_picture"
TARGET_SHAPE = "dslog/target_shape"

# ------------------------------------------------------------------ reuse-signatures asset
VIEWS_TABLE = "dslog/views"
VIEW_COUNT = "dslog/view_count"
VIEW_HITS = "dslog/view_hits"
VIEWS_BY_KIND = "dslog/views_by_kind"

# ------------------------------------------------------------------ lineage checks
CHECK_ARRAY = "dslog/array"
CHECK_VERSION = "dslog/version"
CHECK_STORE_SHAPE = "dslog/store_shape"
CHECK_OPERATIONS = "dslog/operations"
CHECK_TABLES = "dslog/tables"
CHECK_PAIRS = "dslog/pairs"
CHECK_ERRORS = "dslog/errors"
CHECK_SHAPE_SOURCE = "dslog/shape_source"
CHECK_PROBLEMS = "dslog/problems"
CHECK_CELLS = "dslog/cells"
CHECK_CELLS_WITH_LINEAGE = "dslog/cells_with_lineage"
CHECK_CONSTANT_CELLS_DECLARED = "dslog/constant_cells_declared"
CHECK_CELLS_WITHOUT_LINEAGE = "dslog/cells_without_lineage"
CHECK_CONSTANT_BOXES = "dslog/constant_boxes"
CHECK_UNCOVERED_PREVIEW = "dslog/uncovered_preview"
CHECK_UNCOVERED_PICTURE = "dslog/uncovered_picture"

# ------------------------------------------------------------------ run tags
#: on a run the query sensor requests: the newest upstream materialization it saw
UPSTREAM_STORAGE_ID_TAG = "dslog/upstream_storage_id"
#: on a saved lineage-query asset
SAVED_QUERY_TAG = "dslog/saved_query"


def format_bytes(n: float) -> str:
    """``96 B``, ``1.2 kB``, ``4.2 MB``, ``3.1 GB`` (decimal units, 2 significant digits)."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 999.5 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{_sig2(n)} {unit}"
        n /= 1000.0
    raise AssertionError  # pragma: no cover - the loop returns


def _sig2(x: float) -> str:
    """``x`` to 2 significant digits, thousands separated, no exponent."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    digits = 1 - math.floor(math.log10(abs(x)))
    r = round(x, digits)
    return f"{r:,.{max(0, digits)}f}"


def format_seconds(s: float) -> str:
    """Seconds to 2 significant digits: ``0.0034 s``, ``1.2 s``, ``130 s``."""
    return f"{_sig2(s)} s"


def format_ratio(r: float) -> str:
    """A compression ratio: ``50,210×`` (whole numbers from 10 up), ``3.4×`` below."""
    return f"{r:,.0f}×" if r >= 10 else f"{r:.1f}×"


def _store_label(store: str | None, base: str | None) -> str:
    """The store directory without machine paths: relative to the value directory when it
    lies under it, else its last component."""
    if store is None:
        return "?"
    root = Path(store)
    if base is not None:
        try:
            return root.relative_to(Path(base)).as_posix()
        except ValueError:
            pass
    return root.name


class LineageMetadata(BaseModel):
    """What a tracked output recorded; :meth:`to_metadata` turns it into the ``dslog/...``
    entries (module docstring)."""

    model_config = ConfigDict(frozen=True)

    obtained: str
    policy: str
    mode: str
    signature: str | None = None
    flagged: bool = False
    flag_reason: str | None = None
    status: str | None = None
    array: str | None = None
    version: str | None = None
    op_id: str | None = None
    op_name: str | None = None
    store: str | None = None
    base_dir: str | None = None
    inputs: dict[str, dict[str, str | None]] | None = None
    raw_rows: int | None = None
    raw_bytes: int | None = None
    stored_rows: int | None = None
    stored_bytes: int | None = None
    capture_s: float | None = None
    write_s: float | None = None
    step_s: float | None = None
    lineage_md: str | None = None
    kinds: str | None = None
    """The operation's DPDS kinds and column effect (``OperationEffects.summary``)."""

    def to_metadata(self) -> dict[str, Any]:
        """At most four entries (the IO manager adds ``dslog/shape``): how lineage was
        obtained, the operation id, the record with its summary table, and the picture."""
        obtained = ALL_TO_ALL if self.flagged else self.obtained
        md: dict[str, Any] = {OBTAINED: dg.MetadataValue.text(obtained)}
        if self.op_id is not None:
            md[OP_ID] = dg.MetadataValue.text(self.op_id)
        md[RECORD] = dg.MetadataValue.md(self.record_markdown())
        if self.lineage_md:
            md[LINEAGE] = dg.MetadataValue.md(self.lineage_md)
        return md

    def record_markdown(self) -> str:
        """``dslog/record``: what the store recorded and the summary table, for a reader of
        the UI (programs read the store by ``dslog/op_id``). Kept under 1000 characters where
        it can be: the UI shows longer markdown behind a link."""
        lines = []
        if self.flagged:
            why = f": {self.flag_reason}" if self.flag_reason else ""
            lines.append(f"**Flagged**: an all-to-all relation stands in for lost lineage{why}")
        if self.status:
            lines.append(self.status)
        if self.array is None:  # nothing recorded
            lines.append(f"Policy `{self.policy}`, mode `{self.mode}`.")
            return "  \n".join(lines)
        head = f"**Stored** `{self.array}` version `{self.version}`"
        if self.op_name is not None:
            head += f" by `{self.op_name}`"
        lines.append(head)
        if self.inputs:
            ins = ", ".join(
                (f"`{arg}` = " if arg != ref["array"] else "")
                + f"`{ref['array']}` version `{ref['version']}`"
                for arg, ref in self.inputs.items()
            )
            lines.append(f"**Inputs** {ins}")
        if self.kinds is not None:
            lines.append(f"**Kinds** {self.kinds}")
        rows = [("policy, mode", f"`{self.policy}`, `{self.mode}`")]
        if self.raw_rows is not None:
            raw = f"{self.raw_rows:,}"
            if self.raw_bytes is not None:
                raw += f" ({format_bytes(self.raw_bytes)} as int64 columns)"
            rows.append(("lineage pairs", raw))
        if self.stored_rows is not None and self.stored_bytes is not None:
            stored = f"{self.stored_rows:,} rows, {format_bytes(self.stored_bytes)}"
            if self.raw_bytes is not None and self.stored_bytes:
                stored += f", ratio {format_ratio(self.raw_bytes / self.stored_bytes)}"
            rows.append(("stored", stored))
        timing = []
        if self.capture_s is not None:
            timing.append(f"capture {format_seconds(self.capture_s)}")
        if self.write_s is not None:
            timing.append(f"write {format_seconds(self.write_s)}")
        if timing and self.step_s and self.step_s > 0 and self.capture_s is not None:
            share = min(1.0, (self.capture_s + (self.write_s or 0.0)) / self.step_s)
            timing.append(f"{share:.0%} of the step")
        if timing:
            rows.append(("seconds", ", ".join(timing)))
        if self.signature:
            rows.append(("reuse signature", f"`{self.signature[:16]}`"))
        rows.append(("store", f"`{_store_label(self.store, self.base_dir)}`"))
        table = ["", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
        return "  \n".join(lines) + "\n" + "\n".join(table)


def record_figures(record: str) -> dict[str, str]:
    """The summary table of a ``dslog/record`` as ``{row name: formatted value}`` (tests and
    scripts that show the figures)."""
    out = {}
    for line in record.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(parts) == 2 and parts[0] and set(parts[0]) != {"-"}:
            out[parts[0]] = parts[1]
    return out


def inputs_json(refs: Sequence[Any]) -> dict[str, dict[str, str | None]]:
    """``dslog/inputs``: parameter -> array name and version."""
    return {r.arg: {"array": r.name, "version": r.version} for r in refs}


def dumps(obj: Any) -> str:
    """Compact JSON (tests compare metadata JSON)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def column_lineage(
    deps: dict[str, dict[str, list[str]]], refs: Sequence[Any], columns: Sequence[str]
) -> dg.TableColumnLineage:
    """``dagster/column_lineage`` of a DataFrame asset.

    Args:
        deps: ``{output column: {input parameter: [input columns]}}``
            (:attr:`dslog_dagster.spark.FrameCapture.column_lineage`).
        refs: the step's :class:`~dslog_dagster.tracked_step.InputRef` objects (parameter -> key);
            inputs that are not assets (op outputs) have no key and are left out.
        columns: the output's columns, in order (every one gets an entry, maybe empty).
    """
    keys = {r.arg: dg.AssetKey(r.asset_key.split("/")) for r in refs if r.asset_key}
    by_column = {
        col: [
            dg.TableColumnDep(asset_key=keys[arg], column_name=c)
            for arg, cols in sorted(deps.get(col, {}).items())
            if arg in keys
            for c in cols
        ]
        for col in columns
    }
    return dg.TableColumnLineage(deps_by_column=by_column)
