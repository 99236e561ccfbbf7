"""The DPDS provenance queries as saved assets.

:func:`provenance_query_asset` makes one asset per question — ``why``, ``how``, ``history``,
``spread`` of an item, record, feature or box of an asset, or what the step that produced the
asset ``invalidated`` — answered on the asset's latest materialization (of ``partition``) with
:mod:`dslog_dagster.core.provenance_queries`. Its materialization carries the answer: a table
(one row per array, or per step for ``how``), the counts, and the summary; it depends on the
asset it asks about, so the lineage sensors and automation conditions that keep saved lineage
queries fresh keep these fresh too. ``spread`` and ``history`` look downstream at what the store
holds when the asset runs: materialize the pipeline first, or run the question after it.
"""

from collections.abc import Sequence
from typing import Any

import dagster as dg

from dslog_dagster.assets.queries import DEFAULT_QUERY_GROUP, DEFAULT_RESOURCE_KEY
from dslog_dagster.core import provenance_queries as pq
from dslog_dagster.core.query.cellspec import cells_from_spec
from dslog_dagster.core.trace import producer_of
from dslog_dagster.errors import DSLogError, QueryError
from dslog_dagster.naming import array_name

__all__ = ["provenance_query_asset"]

_QUESTIONS = ("why", "how", "history", "spread", "invalidated")


def _table(rows: list[dict[str, Any]]) -> dg.TableMetadataValue:
    columns = list(rows[0]) if rows else ["array"]

    def cell(v: Any) -> Any:
        if v is None or isinstance(v, bool | int | float | str):
            return v
        return str(v)

    return dg.TableMetadataValue(
        records=[dg.TableRecord({c: cell(r[c]) for c in columns}) for r in rows],
        schema=dg.TableSchema(columns=[dg.TableColumn(c, "string") for c in columns]),
    )


def _answer(
    context: dg.AssetExecutionContext,
    resource_key: str,
    key: dg.AssetKey,
    question: pq.Question,
    partition: str | None,
    row: int | None,
    column: int | None,
    cells: Sequence[str],
) -> dg.MaterializeResult[Any]:
    """Answer ``question`` on the latest materialization of ``key`` (see
    :func:`provenance_query_asset`)."""
    log = getattr(context.resources, resource_key).session_for(context)
    entry = context.instance.get_latest_materialization_event(key)
    if entry is None:
        raise dg.Failure(
            description=f"`{key.to_user_string()}` has not been materialized yet: "
            "materialize it first."
        )
    try:
        rec = log.store.get_array(array_name(key, partition), entry.run_id)
        if question == "invalidated":
            producer = producer_of(log.store, rec)
            if producer is None:
                msg = (
                    f"`{rec.name}` version `{rec.version}` is a source: no step produced "
                    "it, so nothing was dropped."
                )
                raise QueryError(msg)
            ans = pq.invalidated(log.store, producer)
        else:
            sel = pq.select(
                rec.shape,
                cells=cells_from_spec(rec.shape, list(cells), columns=rec.column_names)
                if cells
                else None,
                row=row,
                column=column,
            )
            ask = {"why": pq.why, "how": pq.how, "history": pq.history, "spread": pq.spread}
            ans = ask[question](log.store, rec, sel)
    except DSLogError as e:
        raise dg.Failure(description=str(e)) from e
    rows = ans.rows()
    context.log.info(ans.summary())
    return dg.MaterializeResult(
        metadata={
            "dslog/question": question,
            "dslog/about": f"{rec.name} @ {rec.version}",
            "dslog/answer": _table(rows),
            "dslog/summary": dg.MetadataValue.md("```\n" + ans.summary() + "\n```"),
            "dslog/arrays": len(ans.arrays),
        }
    )


def provenance_query_asset(
    name: str,
    question: pq.Question,
    asset: str | Sequence[str] | dg.AssetKey,
    *,
    row: int | None = None,
    column: int | None = None,
    cells: Sequence[str] = (),
    partition: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str = DEFAULT_QUERY_GROUP,
    resource_key: str = DEFAULT_RESOURCE_KEY,
    description: str | None = None,
) -> dg.AssetsDefinition:
    """A saved asset answering one DPDS provenance question about ``asset``.

    Args:
        name: the asset's name.
        question: ``why``, ``how``, ``history``, ``spread`` (of the selection) or
            ``invalidated`` (what the step that produced ``asset`` dropped of its inputs).
        asset: the asset asked about (key, ``"a/b"`` string or path).
        row, column: an item (both), a record (``row``) or a feature (``column``).
        cells: box strings of the asset's cells (``["0:10,3"]``) instead of row/column.
        partition: the asset's partition (its latest materialization of that partition).

    Raises:
        QueryError: an unknown question, or a selection given to ``invalidated``.

    Examples:
        >>> why = provenance_query_asset("why_row_3", "why", "frames/joined", row=3)
        >>> why.key.path
        ['why_row_3']
    """
    if question not in _QUESTIONS:
        msg = f"A provenance question is one of {', '.join(_QUESTIONS)}; not {question!r}."
        raise QueryError(msg)
    if question == "invalidated" and (row is not None or column is not None or cells):
        msg = "`invalidated` asks about the step that produced the asset: give no selection."
        raise QueryError(msg)
    key = (
        asset
        if isinstance(asset, dg.AssetKey)
        else (
            dg.AssetKey.from_user_string(asset)
            if isinstance(asset, str)
            else dg.AssetKey(list(asset))
        )
    )
    what = (
        f"item ({row}, {column})"
        if row is not None and column is not None
        else f"record {row}"
        if row is not None
        else f"feature {column}"
        if column is not None
        else f"cells [{', '.join(cells)}]"
        if cells
        else "every cell"
    )
    text = description or (
        f"DPDS `{question}` of {what} of `{key.to_user_string()}`"
        if question != "invalidated"
        else f"What the step producing `{key.to_user_string()}` dropped of its inputs (DPDS)."
    )

    @dg.asset(
        name=name,
        key_prefix=key_prefix,
        group_name=group_name,
        kinds={"dslog"},
        deps=[key],
        required_resource_keys={resource_key},
        description=text,
    )
    def _provenance(context: dg.AssetExecutionContext) -> dg.MaterializeResult[Any]:
        return _answer(context, resource_key, key, question, partition, row, column, cells)

    return _provenance
