"""Explain what changed since the previous materialization, as an asset check.

:func:`change_checks` gives each tracked NumPy asset a check, ``dslog_explain_change``, that
compares its latest materialization with the one before (of the same partition) using
:func:`~dslog_dagster.core.change.explain_change`: which output cells changed, which upstream
cells they trace back to through each version's lineage, which of those differ, and where
the change starts (a source whose data changed, or a step that computed differently from equal
inputs). The check passes when no cell changed (and on a first materialization); otherwise it
fails with severity WARN by default — a change is news, not an error — and its description and
metadata carry the explanation: counts and percentages (as PROVision reports them), a table per
upstream array, and a picture of the changed cells.

Values come from the deployment's :class:`~dslog_dagster.io_managers.DSLogIOManager`, which
keeps every materialization as its own version (``DSLogIOManager.value_loader()``); a value
it no longer holds (retention) or never held (an intermediate array) is reported as not
comparable.
"""

from collections.abc import Iterable
from typing import Any

import dagster as dg

from dslog_dagster.assets._render import boxes_preview, cells_markdown
from dslog_dagster.assets.checks import AssetRef, _expects_lineage
from dslog_dagster.assets.queries import DEFAULT_RESOURCE_KEY
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.change import ChangeExplanation, explain_change
from dslog_dagster.errors import DSLogError
from dslog_dagster.naming import array_name

__all__ = ["CHECK_CHANGE", "change_checks", "explain_asset_change"]

CHECK_CHANGE = "dslog_explain_change"


def explain_asset_change(
    log: DSLog,
    io_manager: Any,
    asset_key: dg.AssetKey | str,
    version_a: str,
    version_b: str,
    partition: str | None = None,
) -> ChangeExplanation:
    """:func:`~dslog_dagster.core.change.explain_change` for an asset: versions are the run
    ids of two materializations, values come from ``io_manager``.

    Raises:
        LineageNotFoundError: a version's lineage or value is not there.
    """
    key = dg.AssetKey.from_user_string(asset_key) if isinstance(asset_key, str) else asset_key
    return explain_change(
        log.store, array_name(key, partition), version_a, version_b, io_manager.value_loader()
    )


def _previous_two(
    instance: dg.DagsterInstance, key: dg.AssetKey
) -> tuple[dg.EventLogRecord | None, dg.EventLogRecord | None]:
    """The latest materialization of ``key`` and the one before it of the same partition."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key), limit=50, ascending=False
    ).records
    if not records:
        return None, None
    latest = records[0]
    pk = latest.partition_key
    earlier = next((r for r in records[1:] if r.partition_key == pk), None)
    return latest, earlier


def _result(
    expl: ChangeExplanation, key: dg.AssetKey, severity: dg.AssetCheckSeverity
) -> dg.AssetCheckResult:
    t = expl.target
    n_changed = 0 if t.changed is None else t.changed.count()
    rows = expl.rows()
    table = dg.TableMetadataValue(
        records=[
            dg.TableRecord(
                {
                    "array": r["array"],
                    "hops": r["hops"],
                    "traced": r["traced_cells"],
                    "traced %": float(r["traced_pct"]),
                    "changed": -1 if r["changed_cells"] is None else r["changed_cells"],
                    "changed %": -1.0 if r["changed_pct"] is None else float(r["changed_pct"]),
                    "change starts here": bool(r["origin"]),
                }
            )
            for r in rows
        ],
        schema=dg.TableSchema(
            columns=[
                dg.TableColumn("array", "string"),
                dg.TableColumn("hops", "int"),
                dg.TableColumn("traced", "int", description="upstream cells the change traces to"),
                dg.TableColumn("traced %", "float"),
                dg.TableColumn("changed", "int", description="-1: values not stored"),
                dg.TableColumn("changed %", "float"),
                dg.TableColumn("change starts here", "bool"),
            ]
        ),
    )
    metadata: dict[str, Any] = {
        "dslog/changed_cells": n_changed,
        "dslog/changed_pct": round(t.percent_changed or 0.0, 3),
        "dslog/versions": f"{t.version_a} → {t.version_b}",
        "dslog/explanation": table,
        "dslog/origins": ", ".join(o.name for o in expl.origins) or "none found",
    }
    if t.changed is not None and n_changed:
        metadata["dslog/changed"] = dg.MetadataValue.md(cells_markdown("changed cells", t.changed))
        metadata["dslog/changed_boxes"] = boxes_preview(t.changed, 10)
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=CHECK_CHANGE,
        passed=n_changed == 0,
        severity=severity,
        description=expl.summary(),
        metadata=metadata,
    )


def change_checks(
    assets_or_keys: Iterable[AssetRef],
    *,
    resource_key: str = DEFAULT_RESOURCE_KEY,
    io_manager_key: str = "io_manager",
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.WARN,
) -> list[dg.AssetChecksDefinition]:
    """A ``dslog_explain_change`` check per asset with upstream assets (see the module doc).

    Args:
        assets_or_keys: assets definitions, specs, keys or ``"a/b"`` strings.
        resource_key: key of the ``DSLogResource``.
        io_manager_key: key of the ``DSLogIOManager`` that stores the assets' values.
        severity: of a failing check (a change was found); WARN by default.
    """
    return [
        _change_check(k, resource_key, io_manager_key, severity)
        for k in _expects_lineage(assets_or_keys)
    ]


def _change_check(
    key: dg.AssetKey, resource_key: str, io_manager_key: str, severity: dg.AssetCheckSeverity
) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=key,
        name=CHECK_CHANGE,
        required_resource_keys={resource_key, io_manager_key},
        description="Which cells changed since the previous materialization, and why "
        "(traced back through both versions' lineage).",
    )
    def _check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        latest, previous = _previous_two(context.instance, key)
        if latest is None or previous is None:
            return dg.AssetCheckResult(
                passed=True,
                description=f"`{key.to_user_string()}` has no earlier materialization to "
                "compare with.",
            )
        log: DSLog = getattr(context.resources, resource_key).session_for(context)
        io_manager = getattr(context.resources, io_manager_key)
        try:
            expl = explain_asset_change(
                log, io_manager, key, previous.run_id, latest.run_id, latest.partition_key
            )
        except DSLogError as e:
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"Cannot explain the change of `{key.to_user_string()}` between "
                f"runs `{previous.run_id}` and `{latest.run_id}`: {e}",
            )
        return _result(expl, key, severity)

    return _check
