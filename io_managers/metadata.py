"""Materialization metadata of tracked assets: the ``dslog/...`` keys and how they are built.

Every ``dslog/...`` key the plugin writes is a constant here — the tracked outputs' keys
below, and those of the query assets, the reuse-signatures asset, the lineage checks and the
run tags of the automation — so the assets, checks and tests use the same strings.

An output whose lineage (or array version) is recorded in the store gets these entries, few on
purpose: Dagster serializes, stores and reads back every entry of every materialization (twice:
in the materialization and the handled-output event), ~35 us per entry on the bench machine,
which was a tenth of a step served from a reuse view with the 22 entries of earlier versions.

=========================  =====================================================================
key                        value
=========================  =====================================================================
``dslog/obtained``         how lineage was obtained: ``captured`` (annotator), ``base``/``dim``/
                           ``gen`` (a reuse view), ``source`` (no tracked
                           inputs: only the array version is registered)
``dslog/signature``        the reuse signature the lineage came from (``none`` for captures
                           that fed no view)
``dslog/op_id``            the registered operation: everything else the store recorded (array
                           name and version, operation name, inputs and their versions,
                           arguments) is ``LineageStore.get_operation(op_id)``
``dslog/raw_rows``         (output cell, input cell) pairs, summed over inputs
``dslog/raw_bytes``        those pairs as int64 columns (``pairs * (l + m) * 8``)
``dslog/stored_rows``      rows of the stored tables (ProvRC rows, or raw rows when columnar)
``dslog/stored_bytes``     bytes of the stored table blobs
``dslog/compression_ratio`` ``raw_bytes / stored_bytes``
``dslog/capture_s``        seconds of the annotated run of the step, or of the reuse lookup and
                           the plain run when a view served it (includes the user code)
``dslog/write_s``          seconds spent compressing and registering lineage in the store
``dslog/capture_share``    ``(capture_s + write_s) / seconds from compute start to lineage
                           stored``
``dslog/record``           markdown: what the store recorded (array and version, operation,
                           inputs and their versions, policy and mode, store directory)
``dslog/lineage``          markdown: per input, a table and a PNG of the input cells feeding a
                           sample of output cells
``dslog/flagged``          ``True`` when an all-to-all relation stands in for lost lineage
                           (only then), with ``dslog/flag_reason``
``dslog/status``           a sentence, when there is something to say (e.g. source arrays)
=========================  =====================================================================

An output with nothing recorded (``dslog/obtained`` ``off``: policy off; ``none``: reuse_only
without a view) gets ``dslog/obtained``, ``dslog/signature`` (``none``), ``dslog/policy``,
``dslog/mode``, ``dslog/flagged`` and ``dslog/status`` saying why.

DataFrame assets (Spark steps) also get Dagster's own keys: ``dagster/column_lineage`` (per
output column, the upstream asset columns its values came from, from the capture's analyzed
plan), ``dagster/column_schema`` and ``dagster/row_count``; ``dslog/shape`` is
``(rows, columns)``, the frame as a lineage array.
"""

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import dagster as dg
import numpy as np
from pydantic import BaseModel, ConfigDict

from dslog_dagster.core.format.blob import table_digest
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.query import CellSet, prepare
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.pictures import cells_png, png_markdown

__all__ = [
    "CAPTURE_S",
    "CAPTURE_SHARE",
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
    "COMPRESSION_RATIO",
    "CONSTANT_CELLS",
    "FLAGGED",
    "FLAG_REASON",
    "LINEAGE",
    "MODE",
    "OBTAINED",
    "OP_ID",
    "POLICY",
    "QUERY_JSON",
    "RAW_BYTES",
    "RAW_ROWS",
    "RECORD",
    "RESULT_BOXES",
    "RESULT_CELLS",
    "RESULT_PATH",
    "RESULT_PICTURE",
    "RESULT_PREVIEW",
    "ROW_COUNT",
    "SAVED_QUERY_TAG",
    "SHAPE",
    "SIGNATURE",
    "SOURCE_PICTURE",
    "STATUS",
    "STORED_BYTES",
    "STORED_ROWS",
    "TARGET_SHAPE",
    "UPSTREAM_STORAGE_ID_TAG",
    "VIEWS_BY_KIND",
    "VIEWS_TABLE",
    "VIEW_COUNT",
    "VIEW_HITS",
    "WRITE_S",
    "LineageMetadata",
    "column_lineage",
    "lineage_markdown",
    "sample_cells",
]

# ------------------------------------------------------------------ tracked outputs
OBTAINED = "dslog/obtained"
SIGNATURE = "dslog/signature"
POLICY = "dslog/policy"
MODE = "dslog/mode"
FLAGGED = "dslog/flagged"
FLAG_REASON = "dslog/flag_reason"
STATUS = "dslog/status"
OP_ID = "dslog/op_id"
RAW_ROWS = "dslog/raw_rows"
RAW_BYTES = "dslog/raw_bytes"
STORED_ROWS = "dslog/stored_rows"
STORED_BYTES = "dslog/stored_bytes"
COMPRESSION_RATIO = "dslog/compression_ratio"
CAPTURE_S = "dslog/capture_s"
WRITE_S = "dslog/write_s"
CAPTURE_SHARE = "dslog/capture_share"
LINEAGE = "dslog/lineage"
RECORD = "dslog/record"
#: the stored value's shape (a DataFrame: ``(rows, columns)``); the shape check reads it as a
#: JSON list or text such as ``(4, 5)``
SHAPE = "dslog/shape"
#: user metadata declaring cells without lineage on purpose (JSON box strings), read by the
#: coverage check
CONSTANT_CELLS = "dslog/constant_cells"
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


class LineageMetadata(BaseModel):
    """The ``dslog/...`` metadata of one materialization; fields map to the key constants."""

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
    inputs: dict[str, dict[str, str | None]] | None = None
    raw_rows: int | None = None
    raw_bytes: int | None = None
    stored_rows: int | None = None
    stored_bytes: int | None = None
    capture_s: float | None = None
    write_s: float | None = None
    step_s: float | None = None
    lineage_md: str | None = None

    def to_metadata(self) -> dict[str, Any]:
        """Dagster metadata values (int/float values get Plots in the UI).

        An output recorded in the store gets few entries (each costs Dagster ~35 us to
        serialize, store and read back, twice: in the materialization and the handled-output
        event): the issue's figures as numbers, the operation id, the record (array,
        version, operation, inputs, policy, store) as one markdown entry and the picture. An
        output with nothing recorded (``off``, ``none``) says why: policy, mode and status.
        """
        if self.array is None:
            md: dict[str, Any] = {
                OBTAINED: dg.MetadataValue.text(self.obtained),
                SIGNATURE: dg.MetadataValue.text(self.signature or "none"),
                POLICY: dg.MetadataValue.text(self.policy),
                MODE: dg.MetadataValue.text(self.mode),
                FLAGGED: dg.MetadataValue.bool(self.flagged),
            }
            if self.status:
                md[STATUS] = dg.MetadataValue.text(self.status)
            return md
        md = {
            OBTAINED: dg.MetadataValue.text(self.obtained),
            SIGNATURE: dg.MetadataValue.text(self.signature or "none"),
        }
        if self.flagged:
            md[FLAGGED] = dg.MetadataValue.bool(True)
            if self.flag_reason:
                md[FLAG_REASON] = dg.MetadataValue.text(self.flag_reason)
        if self.status:
            md[STATUS] = dg.MetadataValue.text(self.status)
        if self.op_id is not None:
            md[OP_ID] = dg.MetadataValue.text(self.op_id)
        for key, num in (
            (RAW_ROWS, self.raw_rows),
            (RAW_BYTES, self.raw_bytes),
            (STORED_ROWS, self.stored_rows),
            (STORED_BYTES, self.stored_bytes),
        ):
            if num is not None:
                md[key] = dg.MetadataValue.int(int(num))
        if self.raw_bytes is not None and self.stored_bytes:
            md[COMPRESSION_RATIO] = dg.MetadataValue.float(self.raw_bytes / self.stored_bytes)
        for key, sec in ((CAPTURE_S, self.capture_s), (WRITE_S, self.write_s)):
            if sec is not None:
                md[key] = dg.MetadataValue.float(float(sec))
        if self.step_s is not None and self.step_s > 0 and self.capture_s is not None:
            share = (self.capture_s + (self.write_s or 0.0)) / self.step_s
            md[CAPTURE_SHARE] = dg.MetadataValue.float(min(1.0, share))
        md[RECORD] = dg.MetadataValue.md(self.record_markdown())
        if self.lineage_md:
            md[LINEAGE] = dg.MetadataValue.md(self.lineage_md)
        return md

    def record_markdown(self) -> str:
        """``dslog/record``: what the store recorded, for a reader of the UI (programs read it
        from the store by ``dslog/op_id``). Its own entry, not the head of ``dslog/lineage``:
        the UI shows markdown under 1000 characters inline, longer markdown behind a link,
        and the picture should stay in view."""
        head = f"**Stored** `{self.array}` version `{self.version}`"
        if self.op_name is not None:
            head += f" by operation `{self.op_name}` (`{self.op_id}`)"
        lines = [
            head + f"; policy `{self.policy}`, mode `{self.mode}`; store `{self.store}`",
        ]
        if self.inputs:
            ins = ", ".join(
                f"`{arg}`: `{ref['array']}` version `{ref['version']}`"
                for arg, ref in self.inputs.items()
            )
            lines.append(f"**Inputs** {ins}")
        return "  \n".join(lines)


def sample_cells(shape: Sequence[int], k: int) -> np.ndarray:
    """``k`` output cells (flat indices) spread evenly over an array, first and last included."""
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(0, size - 1, num=min(k, size)).round().astype(np.int64))


def _flat(cols: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    if len(shape) == 0:
        return np.zeros(cols.shape[1] if cols.ndim == 2 else 0, dtype=np.int64)
    flat: np.ndarray = np.ravel_multi_index(tuple(cols), tuple(shape)).astype(np.int64)
    return flat


def _feeding_and_used(
    lineage: LineageRelation | LineageTable, sample: np.ndarray
) -> tuple[np.ndarray, int]:
    """Flat input cells feeding the ``sample`` output cells, and how many input cells feed any.

    A compressed table answers both with two backward queries over its intervals, never
    expanding the relation (a reuse hit must not pay for a cell-by-cell walk of its lineage).
    """
    if isinstance(lineage, LineageTable):
        hop = prepare(lineage)
        feeding = hop.run(CellSet.from_flat(lineage.out_shape, sample), "backward").to_flat()
        used = hop.run(CellSet.full(lineage.out_shape), "backward").count()
        return np.unique(feeding), int(used)
    of = _flat(lineage.out_cols, lineage.out_shape)
    inf = _flat(lineage.in_cols, lineage.in_shape)
    return np.unique(inf[np.isin(of, sample)]), int(np.unique(inf).size)


def lineage_markdown(
    output: str,
    out_shape: Sequence[int],
    inputs: Sequence[tuple[str, LineageRelation | LineageTable]],
    k: int,
    max_pictures: int = 4,
) -> str:
    """Markdown: which cells of each input feed a sample of ``k`` output cells (with PNGs).

    Also gives each input's coverage (the share of its cells that feed any output cell).

    Cached when every input's lineage is a compressed table (a served reuse view hands the
    same tables on every hit, and drawing cost about as much as the step itself): the key is
    the output name and shape, ``k``, ``max_pictures`` and each input's name with the
    :func:`~dslog_dagster.core.format.blob.table_digest` of its table, i.e. everything the
    markdown is computed from, so a hit is exactly what a fresh render would give.
    """
    key = _picture_key(output, out_shape, inputs, k, max_pictures)
    if key is not None:
        with _picture_lock:
            hit = _pictures.get(key)
            if hit is not None:
                _pictures.move_to_end(key)
                return hit
    text = _render_markdown(output, out_shape, inputs, k, max_pictures)
    if key is not None:
        with _picture_lock:
            _pictures[key] = text
            while len(_pictures) > _PICTURE_CACHE_SIZE:
                _pictures.popitem(last=False)
    return text


_PICTURE_CACHE_SIZE = 256
_pictures: "OrderedDict[tuple[Any, ...], str]" = OrderedDict()
_picture_lock = threading.Lock()


def _picture_key(
    output: str,
    out_shape: Sequence[int],
    inputs: Sequence[tuple[str, LineageRelation | LineageTable]],
    k: int,
    max_pictures: int,
) -> tuple[Any, ...] | None:
    """The cache key of a lineage picture, ``None`` when an input is an uncompressed relation
    (a capture: drawn once, never served again, so not worth digesting)."""
    if not all(isinstance(rel, LineageTable) for _, rel in inputs):
        return None
    digests = tuple((name, table_digest(rel)) for name, rel in inputs)  # type: ignore[arg-type]
    return (output, tuple(int(d) for d in out_shape), int(k), int(max_pictures), digests)


def clear_picture_cache() -> None:
    """Forget every cached lineage picture (tests)."""
    with _picture_lock:
        _pictures.clear()


def _render_markdown(
    output: str,
    out_shape: Sequence[int],
    inputs: Sequence[tuple[str, LineageRelation | LineageTable]],
    k: int,
    max_pictures: int,
) -> str:
    sample = sample_cells(out_shape, k)
    idx = ", ".join(
        str(tuple(int(i) for i in np.unravel_index(s, tuple(out_shape)))) if out_shape else "()"
        for s in sample
    )
    lines = [
        f"**Cell lineage of `{output}`** — input cells feeding output cells {idx}",
        "",
        "| input | cells feeding the sample | input cells used by any output | coverage |",
        "|---|---|---|---|",
    ]
    pictures = []
    for n, (name, rel) in enumerate(inputs):
        in_size = int(np.prod(rel.in_shape, dtype=np.int64))
        feeding, used = _feeding_and_used(rel, sample)
        cov = used / in_size if in_size else 0.0
        lines.append(f"| `{name}` | {feeding.size} | {used} of {in_size} | {cov:.1%} |")
        if n < max_pictures:
            mask = np.zeros(in_size, dtype=bool)
            mask[feeding] = True
            png = cells_png(mask.reshape(rel.in_shape), title=f"{name}: {feeding.size} cells")
            pictures.append(png_markdown(png, f"{name} cells feeding the sample of {output}"))
    if pictures:
        lines += ["", *pictures]
    return "\n".join(lines)


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
