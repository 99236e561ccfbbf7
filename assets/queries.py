"""Lineage-query assets: an ad-hoc one configured in the launchpad, and saved queries.

A lineage query picks cells of a *source* asset and asks which cells of a *target* asset they
are linked to, over every path of operations between the two in the lineage store
(:meth:`DSLog.lineage_between`): forward when the target is downstream ("what did these
inputs affect?"), backward when it is upstream ("where did these outputs come from?").

Each materialization writes the answer as Parquet (one row per box of the exact
:class:`CellSet`, ``CellSet.to_arrow()``) to ``<store>/queries/<asset key>/<run id>.parquet``
(written to a temporary name and renamed, so readers never see half a file), and attaches
metadata: result size in cells and boxes, a preview table of the boxes, the query as JSON and a
picture of the selected source cells and of the linked target cells.

Why results live under the store and not in an IO manager: the query asset's value *is* a
lineage artefact, versioned like the lineage it was computed from (by run id); keeping it
beside that lineage lets ``dslog`` tools and later runs find it without Dagster.
"""

import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
from dagster._config.config_type import ConfigScalar, ConfigScalarKind
from dagster._config.errors import PostProcessingError
from pydantic import Field, field_validator

from dslog_dagster.assets._render import boxes_preview, cells_markdown
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.on_demand import Reconstruction, answering
from dslog_dagster.core.query import CellSet, Direction, QueryEngine, check_engine
from dslog_dagster.core.query.cellspec import cells_from_spec, parse_box
from dslog_dagster.core.store import ArrayRecord
from dslog_dagster.errors import (
    DeferredLineageError,
    LineageNotFoundError,
    LineageStorageError,
    QueryError,
    ReconstructionError,
)
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.naming import array_name

__all__ = [
    "DEFAULT_QUERY_GROUP",
    "DEFAULT_RESOURCE_KEY",
    "LineageQueryConfig",
    "LineageQueryResult",
    "SavedLineageQuery",
    "lineage_query_asset",
    "query_metadata",
    "run_lineage_query",
    "saved_lineage_query",
    "write_query_result",
]

DEFAULT_RESOURCE_KEY = "dslog"
"""Resource key under which the query assets, checks and sensors expect a ``DSLogResource``."""
DEFAULT_QUERY_GROUP = "lineage_queries"
QUERIES_DIR = "queries"
"""Sub-directory of the store holding query results (``<asset key>/<run id>.parquet``)."""

QueryDirection = Literal["auto", "forward", "backward"]


def check_asset_key_text(text: str) -> str:
    """``text`` if it reads as an asset key (``"a/b"``), else a :class:`QueryError`."""
    if not isinstance(text, str) or not text.strip():
        msg = "An asset key is text such as `images/raw`; got an empty value."
        raise QueryError(msg)
    if any(not part.strip() for part in text.split("/")):
        msg = f"`{text}` is not an asset key: a part between `/` is empty (write e.g. `a/b`)."
        raise QueryError(msg)
    return text


class LineageQueryConfig(dg.Config):
    """One lineage query, editable in the launchpad.

    Cells are text so the launchpad can hold them: `cells` are boxes in NumPy index notation
    ("0:10,3" is rows 0-9 of column 3, "5" is row 5, ":" is everything) and `indices` are
    single cells as index lists ([[0, 1], [2, 3]]); the query starts from their union, or from
    every cell of the source when both are empty.
    """

    source: str = Field(description="Asset key of the array whose cells you pick, e.g. a/b.")
    target: str = Field(description="Asset key of the array to carry them to (up or down).")
    cells: list[str] = Field(
        default=[],
        description='Boxes of the source, NumPy style: "0:10,3", "5", ":". '
        "Empty (with no indices): every cell.",
    )
    indices: list[list[int]] = Field(
        default=[], description="Single source cells as index lists, e.g. [[0, 1], [2, 3]]."
    )
    direction: QueryDirection = Field(
        default="auto",
        description="forward: target is downstream; backward: upstream; auto: whichever holds.",
    )
    source_partition: str | None = Field(default=None, description="Partition of the source.")
    target_partition: str | None = Field(default=None, description="Partition of the target.")
    preview_rows: int = Field(default=20, ge=0, le=1000, description="Boxes in the preview.")

    @field_validator("source", "target")
    @classmethod
    def _key(cls, v: str) -> str:
        return check_asset_key_text(v)

    @field_validator("cells")
    @classmethod
    def _boxes(cls, v: list[str]) -> list[str]:
        for box in v:
            parse_box(box, names=True)  # a frame's column may be named; checked at run time
        return v


class _CheckedText(ConfigScalar):
    """A text field Dagster validates when a run is launched (post-processing runs while the
    run config is resolved, before a run exists), so a bad launchpad value is refused instead
    of failing the query asset. The one hook Dagster offers for this is its config types'
    ``post_process`` (not public API: :func:`launch_config_schema` keeps it in one place)."""

    def __init__(self, key: str, description: str, check: Callable[[str], object]) -> None:
        super().__init__(
            key=key, given_name=key, scalar_kind=ConfigScalarKind.STRING, description=description
        )
        self._check = check

    def post_process(self, value: Any) -> Any:
        try:
            self._check(value)
        except QueryError as e:
            raise PostProcessingError(str(e)) from e
        return value


_ASSET_KEY_TEXT = _CheckedText("DSLogAssetKey", "An asset key such as a/b.", check_asset_key_text)
_BOX_TEXT = _CheckedText(
    "DSLogBox",
    "A box of cells, NumPy style: 0:10,3 (a frame's column by name: 0:10,genres).",
    lambda text: parse_box(text, names=True),
)


def launch_config_schema() -> dict[str, dg.Field]:
    """The ad-hoc query's config schema: :class:`LineageQueryConfig`'s fields, with asset keys
    and boxes checked by Dagster at launch (a malformed one never starts a run).

    Examples:
        >>> from dslog_dagster import DSLogResource
        >>> defs = dg.Definitions(assets=[lineage_query_asset()],
        ...                       resources={"dslog": DSLogResource()})
        >>> job = defs.resolve_implicit_global_asset_job_def()
        >>> query = {"source": "a", "target": "b", "cells": ["0:x"]}
        >>> bad = {"ops": {"lineage_query": {"config": query}}}
        >>> try:
        ...     dg.validate_run_config(job, bad)
        ... except dg.DagsterInvalidConfigError as e:
        ...     print("refused:", "Cannot read `0:x`" in str(e))
        refused: True
    """
    shape = LineageQueryConfig.to_fields_dict()
    fields = dict(shape)
    for name in ("source", "target"):
        fields[name] = dg.Field(_ASSET_KEY_TEXT, description=shape[name].description)
    fields["cells"] = dg.Field(
        [_BOX_TEXT], default_value=[], is_required=False, description=shape["cells"].description
    )
    return fields


class SavedLineageQuery(dg.Model):
    """A named query for :func:`saved_lineage_query` and the YAML component."""

    name: str
    source: str
    target: str
    cells: list[str] = Field(default_factory=list)
    indices: list[list[int]] = Field(default_factory=list)
    direction: QueryDirection = "auto"
    source_partition: str | None = None
    target_partition: str | None = None
    preview_rows: int = 20
    eager: bool = False
    description: str | None = None

    def config(self) -> LineageQueryConfig:
        """The query part, as the ad-hoc asset's config."""
        return LineageQueryConfig(
            **self.model_dump(exclude={"name", "eager", "description"}),
        )


@dataclass(frozen=True, slots=True)
class LineageQueryResult:
    """The answer of one query and what it was computed from."""

    config: LineageQueryConfig
    start: CellSet  # the selected cells of the source
    cells: CellSet  # the linked cells of the target
    source: ArrayRecord
    target: ArrayRecord
    direction: Direction

    def to_json(self) -> dict[str, Any]:
        """The query, resolved: what the UI shows and the Parquet file records."""
        return {
            **self.config.model_dump(),
            "resolved_direction": self.direction,
            "source_array": self.source.name,
            "source_version": self.source.version,
            "target_array": self.target.name,
            "target_version": self.target.version,
            "source_cells": self.start.count(),
        }


def _array(key: str, partition: str | None) -> str:
    return array_name(dg.AssetKey.from_user_string(key), partition)


def run_lineage_query(
    log: DSLog,
    config: LineageQueryConfig,
    *,
    engine: QueryEngine = "native",
    spark: Any = None,
) -> LineageQueryResult:
    """Run ``config`` on the newest versions of its arrays in ``log``'s store.

    ``engine="spark"`` runs each hop as a range join on Spark
    (:class:`~dslog_dagster.spark.query.SparkQueryEngine`) on ``spark``, else on the running
    SparkSession, else on a local one; the answer is the same.

    Raises:
        LineageNotFoundError: an asset has no lineage in the store, or no chain of operations
            links them in the requested direction.
        QueryError: malformed cells, or cells outside the source array.
    """
    src_name = _array(config.source, config.source_partition)
    dst_name = _array(config.target, config.target_partition)
    src = _stored(log, config.source, src_name)
    _stored(log, config.target, dst_name)
    boxes = config.cells if config.cells or config.indices else [":"]
    start = cells_from_spec(src.shape, boxes, config.indices, columns=src.column_names)
    if config.direction != "auto":
        tried: tuple[Direction, ...] = (config.direction,)
    else:
        tried = ("forward", "backward")
    # DSLog.lineage_between, or the Spark engine's (the same call without `run_hop`)
    between: Callable[..., CellSet] = log.lineage_between
    on_spark = None
    if check_engine(engine) == "spark":
        from dslog_dagster.spark.query import spark_engine

        on_spark = spark_engine(log, spark)
        between = on_spark.lineage_between
    last: LineageNotFoundError | None = None
    try:
        for way in tried:
            try:
                cells = between(src_name, dst_name, start, direction=way)
            except DeferredLineageError:
                raise  # the path is there; its lineage is on demand (not "no chain")
            except LineageNotFoundError as e:
                last = e
                continue
            target = log.store.get_array(dst_name)
            if target.shape != cells.shape:  # lineage_between answered for an older version
                target = next(
                    (r for r in _versions(log, dst_name) if r.shape == cells.shape), target
                )
            return LineageQueryResult(config, start, cells, src, target, way)
    finally:
        if on_spark is not None:
            on_spark.close()
    if config.direction == "auto":
        msg = (
            f"No chain of operations links `{src_name}` and `{dst_name}` in either direction "
            "in the lineage store; materialize the assets between them with lineage tracking "
            "(or check the asset keys and partitions)."
        )
        raise LineageNotFoundError(msg) from last
    assert last is not None
    raise last


def _stored(log: DSLog, key: str, name: str) -> ArrayRecord:
    """The newest version of ``name``; if there is none, an error that says which store was read
    and what to do (not the store API's advice to register the array by hand)."""
    try:
        return log.store.get_array(name)
    except LineageNotFoundError as e:
        empty = " (it is empty)" if not log.store.arrays() else ""
        msg = (
            f"The lineage store `{log.store.root}`{empty}, the `dslog` resource's, has no lineage "
            f"of asset `{key}` (array `{name}`). Materialize it with lineage tracking, with an "
            "IO manager given this resource (DSLogIOManager(dslog=dslog) or "
            "with_lineage(io, dslog)), or check the asset key and partition."
        )
        raise LineageNotFoundError(msg) from e


def _versions(log: DSLog, name: str) -> list[ArrayRecord]:
    return [r for r in log.store.arrays() if r.name == name]


def write_query_result(
    store_root: Path, asset_key: dg.AssetKey, run_id: str, table: pa.Table
) -> Path:
    """Write ``table`` to ``<store>/queries/<asset key>/<run id>.parquet`` atomically.

    Raises:
        LineageStorageError: the file could not be written (nothing is left behind).
    """
    parts = [*asset_key.path, f"{run_id}.parquet"]
    if any(p in ("", ".", "..") or "/" in p or "\\" in p or "\0" in p for p in parts):
        msg = f"Cannot store a query result for asset `{asset_key.to_user_string()}`/{run_id}."
        raise LineageStorageError(msg)
    final = store_root.joinpath(QUERIES_DIR, *parts)
    tmp = final.parent / f".tmp-{uuid.uuid4().hex}.parquet"
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        msg = f"Could not write the query result `{final}`: {e}"
        raise LineageStorageError(msg) from e
    return final


def query_metadata(result: LineageQueryResult, path: Path | None) -> dict[str, Any]:
    """Materialization metadata of a query: size, preview, the query and its picture."""
    src_title = f"query cells of {result.source.name}"
    dst_title = f"linked cells of {result.target.name}"
    md: dict[str, Any] = {
        m.RESULT_CELLS: dg.MetadataValue.int(result.cells.count()),
        m.RESULT_BOXES: dg.MetadataValue.int(result.cells.n_boxes),
        m.TARGET_SHAPE: dg.MetadataValue.text(str(tuple(result.cells.shape))),
        m.QUERY_JSON: dg.MetadataValue.json(result.to_json()),
        m.RESULT_PREVIEW: boxes_preview(result.cells, result.config.preview_rows),
        m.RESULT_PICTURE: dg.MetadataValue.md(cells_markdown(dst_title, result.cells)),
        m.SOURCE_PICTURE: dg.MetadataValue.md(cells_markdown(src_title, result.start)),
        "dagster/row_count": dg.MetadataValue.int(result.cells.n_boxes),
    }
    if path is not None:
        md[m.RESULT_PATH] = dg.MetadataValue.path(str(path))
    return md


def _materialize(
    context: dg.AssetExecutionContext,
    resource_key: str,
    config: LineageQueryConfig,
    io_manager_key: str | None = None,
) -> dg.MaterializeResult[Any]:
    """Run ``config``; with ``io_manager_key`` (``on_demand=True``), first reconstruct the
    lineage of every on-demand step the query meets, from the values that IO manager keeps."""
    dslog = getattr(context.resources, resource_key)
    log: DSLog = dslog.session_for(context)
    rebuilt: list[Reconstruction] = []
    try:
        if io_manager_key is None:
            result = run_lineage_query(log, config, engine=dslog.query_engine)
        else:
            io = getattr(context.resources, io_manager_key)
            result, rebuilt = answering(
                log.store,
                lambda: run_lineage_query(log, config, engine=dslog.query_engine),
                io.value_loader(frames=True),
                views=dslog.registry(store=log.store) if dslog.reuse else None,
            )
            for r in rebuilt:
                how = "re-run under capture" if r.obtained == "re-run" else f"from a {r.obtained}"
                how += f"; {r.note}" if r.note else ""
                context.log.info(
                    f"reconstructed the lineage of on-demand step `{r.deferred.op_name}` "
                    f"({how} in {r.seconds:.2f} s)"
                )
    except (LineageNotFoundError, QueryError, ReconstructionError) as e:
        # the message says what to do; Dagster shows it as the step failure
        raise dg.Failure(description=str(e)) from e
    key = context.asset_key
    table = result.cells.to_arrow()
    meta = dict(table.schema.metadata or {})
    meta[b"dslog.query"] = json.dumps(result.to_json()).encode()
    path = write_query_result(
        log.store.root, key, context.run.run_id, table.replace_schema_metadata(meta)
    )
    context.log.info(
        f"{result.direction} lineage {result.source.name} -> {result.target.name}: "
        f"{result.cells.count()} cell(s) in {result.cells.n_boxes} box(es), written to {path}"
    )
    meta = query_metadata(result, path)
    if io_manager_key is not None:
        meta["dslog/reconstructed"] = len(rebuilt)
    return dg.MaterializeResult(metadata=meta)


def lineage_query_asset(
    name: str = "lineage_query",
    *,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str = DEFAULT_QUERY_GROUP,
    resource_key: str = DEFAULT_RESOURCE_KEY,
    description: str | None = None,
) -> dg.AssetsDefinition:
    """The ad-hoc lineage-query asset: pick source, target and cells in the launchpad.

    Its latest materialization shows whatever query last ran (the query is in the metadata);
    use :func:`saved_lineage_query` for answers people should find again.

    Examples:
        >>> from dslog_dagster import DSLogResource
        >>> defs = dg.Definitions(assets=[lineage_query_asset()],
        ...                       resources={"dslog": DSLogResource(store_dir=".dslog")})
    """

    @dg.asset(
        name=name,
        key_prefix=key_prefix,
        group_name=group_name,
        kinds={"dslog"},
        required_resource_keys={resource_key},
        config_schema=launch_config_schema(),
        description=description
        or "Ad-hoc cell-level lineage query: configure source, target and cells in the launchpad.",
    )
    def _adhoc_query(context: dg.AssetExecutionContext) -> dg.MaterializeResult[Any]:
        config = LineageQueryConfig(**context.op_execution_context.op_config)
        return _materialize(context, resource_key, config)

    return _adhoc_query


def saved_lineage_query(
    query: SavedLineageQuery | str,
    source: str | None = None,
    target: str | None = None,
    cells: Sequence[str] = (),
    *,
    indices: Sequence[Sequence[int]] = (),
    direction: QueryDirection = "auto",
    source_partition: str | None = None,
    target_partition: str | None = None,
    eager: bool = False,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str = DEFAULT_QUERY_GROUP,
    resource_key: str = DEFAULT_RESOURCE_KEY,
    description: str | None = None,
    on_demand: bool = False,
    io_manager_key: str = "io_manager",
) -> dg.AssetsDefinition:
    """One stable asset per saved query, depending on its source and target assets.

    Pass a :class:`SavedLineageQuery`, or its name plus the query's fields. ``eager=True``
    gives the asset ``AutomationCondition.eager()``, so an automation-condition sensor
    re-runs it whenever an upstream asset materializes; otherwise
    :func:`~dslog_dagster.assets.lineage_query_sensor` does. ``on_demand=True`` reconstructs
    the lineage of steps that ran with ``policy="on_demand"`` when the query meets them (from
    the values the ``io_manager_key`` IO manager keeps; see
    :mod:`dslog_dagster.core.on_demand`) instead of failing.

    Examples:
        >>> asset = saved_lineage_query("hot_pixels_origin", source="images/hotspots",
        ...                             target="images/raw", cells=["0:4"])
        >>> asset.key.path
        ['hot_pixels_origin']
    """
    if isinstance(query, str):
        if source is None or target is None:
            msg = f"Saved query `{query}` needs a `source` and a `target` asset key."
            raise QueryError(msg)
        query = SavedLineageQuery(
            name=query,
            source=source,
            target=target,
            cells=list(cells),
            indices=[list(c) for c in indices],
            direction=direction,
            source_partition=source_partition,
            target_partition=target_partition,
            eager=eager,
            description=description,
        )
    config = query.config()
    cells_text = ", ".join(config.cells) + (
        f" + {len(config.indices)} cell(s)" * bool(config.indices)
    )
    text = query.description or (
        f"Saved lineage query: cells [{cells_text}] of `{config.source}` carried "
        f"{config.direction if config.direction != 'auto' else 'up or down'} to `{config.target}`."
    )
    deps = list(dict.fromkeys([config.source, config.target]))

    @dg.asset(
        name=query.name,
        key_prefix=key_prefix,
        group_name=group_name,
        kinds={"dslog"},
        deps=[dg.AssetKey.from_user_string(d) for d in deps],
        required_resource_keys={resource_key, io_manager_key} if on_demand else {resource_key},
        automation_condition=dg.AutomationCondition.eager() if query.eager else None,
        description=text,
        tags={m.SAVED_QUERY_TAG: "true"},
    )
    def _saved_query(context: dg.AssetExecutionContext) -> dg.MaterializeResult[Any]:
        return _materialize(context, resource_key, config, io_manager_key if on_demand else None)

    return _saved_query
