"""The reuse-signature asset: a table of the store's reuse views.

A *reuse view* (the reuse issue) lets a re-run of an operation take its lineage from an
earlier, verified capture instead of capturing again; each view is identified by a
signature. This asset lists them — the asset and step each serves, signature, kind, hits,
last verified — so the UI shows which steps are served from views and how often.

The asset reads views through a :data:`ViewSource`: a function from a :class:`DSLog` session
to rows (mappings with the :data:`VIEW_COLUMNS` keys). :func:`registry_view_rows` is the
default and reads ``dslog_dagster.core.reuse.ViewRegistry(store_root).views()``.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import dagster as dg

from dslog_dagster.assets.queries import (
    DEFAULT_QUERY_GROUP,
    DEFAULT_RESOURCE_KEY,
    write_query_result,
)
from dslog_dagster.core.api import DSLog
from dslog_dagster.errors import DSLogError
from dslog_dagster.io_managers import metadata as m

__all__ = ["VIEW_COLUMNS", "ViewSource", "registry_view_rows", "reuse_signatures_asset"]

VIEW_COLUMNS = ("signature", "kind", "hits", "last_verified")
"""Keys of one view row: str, str (e.g. base / dim / gen), int, datetime or ISO str or None;
an ``op`` key (the step the view serves: ``<asset key>@<code version>`` for a tracked asset,
the op name for a tracked op, the function's name outside Dagster) is shown when present."""

ViewSource = Callable[[DSLog], Iterable[Mapping[str, Any]]]


def registry_view_rows(log: DSLog) -> Iterable[Mapping[str, Any]]:
    """Rows of the store's reuse-view registry (:class:`~dslog_dagster.core.reuse.ViewRegistry`),
    one per view: signature, kind, hits, last verified (and its status and operation)."""
    from dslog_dagster.core.reuse import ViewRegistry

    for v in ViewRegistry(log.store).views():
        yield v.as_dict()


def _row(raw: Mapping[str, Any]) -> dict[str, Any]:
    missing = [c for c in ("signature", "kind") if raw.get(c) in (None, "")]
    if missing:
        msg = f"A reuse view row lacks {missing}: {dict(raw)!r}."
        raise DSLogError(msg)
    verified = raw.get("last_verified")
    if isinstance(verified, datetime):
        verified = verified.isoformat(timespec="seconds")
    step = str(raw.get("op") or "")
    return {
        "asset": step.split("@", 1)[0],
        "step": step,
        "signature": str(raw["signature"]),
        "kind": str(raw["kind"]),
        "hits": int(raw.get("hits") or 0),
        "last_verified": "" if verified is None else str(verified),
    }


def reuse_signatures_asset(
    views: ViewSource | None = None,
    *,
    name: str = "dslog_reuse_signatures",
    key_prefix: str | Sequence[str] | None = None,
    group_name: str = DEFAULT_QUERY_GROUP,
    resource_key: str = DEFAULT_RESOURCE_KEY,
    max_rows: int = 200,
) -> dg.AssetsDefinition:
    """An asset whose materialization tables the store's reuse views, by asset (most hits
    first within one).

    The full table is also written as Parquet beside query results
    (``<store>/queries/<asset key>/<run id>.parquet``); the UI shows the first ``max_rows``.

    Args:
        views: where rows come from (default: :func:`registry_view_rows`).
    """
    source = views or registry_view_rows

    @dg.asset(
        name=name,
        key_prefix=key_prefix,
        group_name=group_name,
        kinds={"dslog"},
        required_resource_keys={resource_key},
        description=(
            "Reuse views of the lineage store: the asset and step each serves, signature, kind, "
            "hits, last verified."
        ),
    )
    def _signatures(context: dg.AssetExecutionContext) -> dg.MaterializeResult[Any]:
        import pyarrow as pa

        log: DSLog = getattr(context.resources, resource_key).session_for(context)
        rows = sorted(
            (_row(r) for r in source(log)),
            key=lambda r: (r["asset"], -r["hits"], r["signature"]),
        )
        by_kind: dict[str, int] = {}
        for r in rows:
            by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + 1
        table = pa.table(
            {
                "asset": pa.array([r["asset"] for r in rows], pa.string()),
                "step": pa.array([r["step"] for r in rows], pa.string()),
                "signature": pa.array([r["signature"] for r in rows], pa.string()),
                "kind": pa.array([r["kind"] for r in rows], pa.string()),
                "hits": pa.array([r["hits"] for r in rows], pa.int64()),
                "last_verified": pa.array([r["last_verified"] for r in rows], pa.string()),
            }
        )
        path = write_query_result(log.store.root, context.asset_key, context.run.run_id, table)
        schema = dg.TableSchema(
            columns=[
                dg.TableColumn("asset", "string", description="asset (or op) the view serves"),
                dg.TableColumn("step", "string", description="its operation: key@code version"),
                dg.TableColumn("signature", "string"),
                dg.TableColumn("kind", "string"),
                dg.TableColumn("hits", "int"),
                dg.TableColumn("last_verified", "string"),
            ]
        )
        return dg.MaterializeResult(
            metadata={
                m.VIEWS_TABLE: dg.MetadataValue.table(
                    [dg.TableRecord(r) for r in rows[:max_rows]], schema=schema
                ),
                m.VIEW_COUNT: dg.MetadataValue.int(len(rows)),
                m.VIEW_HITS: dg.MetadataValue.int(sum(r["hits"] for r in rows)),
                m.VIEWS_BY_KIND: dg.MetadataValue.json(by_kind),
                m.RESULT_PATH: dg.MetadataValue.path(str(path)),
                "dagster/row_count": dg.MetadataValue.int(len(rows)),
            }
        )

    return _signatures
