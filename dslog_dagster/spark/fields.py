"""Fields of Spark struct columns as locations: a field path is a lineage column.

The cell model stays ``(row, column)``; what changes is what a *column* of the lineage
relation is for a frame with struct columns: each **leaf field** is a column of its own, named
by its path (``s.a``, ``s.c.d``), in schema order, and the stored array's schema records the
path with the leaf's type. A struct column ``s<a, b>`` next to ``id`` is the lineage array
``(rows, 3)`` with columns ``id``, ``s.a``, ``s.b``. ProvRC, the store, the queries and reuse
need nothing new: they see columns.

The capture follows the fields through expressions
(:func:`~dslog_dagster.spark.plan.field_lineage`): a field read
(``col("s.a")``, ``getField``, ``select("s.*")``) takes that field's lineage, ``struct(...)``
builds a struct from its arguments' lineage, ``withField`` replaces or adds one field's and
``dropFields`` drops one. Any other expression over fields is the union of its operands
(``upper(s.a)`` ← ``s.a``). What has no field rule stays whole-cell, and says so in the docs'
rule table: a struct produced by a UDF, by an aggregate (``first(s)``), or read from an array of
structs (``explode``), has every field depend on everything the struct depends on.
"""

from collections.abc import Sequence
from typing import Any

from dslog_dagster.spark.plan import ColumnLineage
from dslog_dagster.spark.state import FrameState

__all__ = ["expand", "leaf_paths", "leaf_schema", "lineage_columns"]


def leaf_paths(data_type: Any) -> list[tuple[tuple[str, ...], str]]:
    """``(path, type)`` of each leaf field of a PySpark ``DataType`` (``[((), type)]`` for a
    non-struct type; arrays and maps are leaves, their elements are not fields)."""
    from pyspark.sql.types import StructType

    if not isinstance(data_type, StructType):
        return [((), data_type.simpleString())]
    out: list[tuple[tuple[str, ...], str]] = []
    for f in data_type.fields:
        out += [((f.name, *p), t) for p, t in leaf_paths(f.dataType)]
    return out


def leaf_schema(fields: Sequence[Any]) -> list[tuple[str, str]]:
    """The lineage columns of a frame's ``StructField`` s: ``(path, type)`` per leaf, the path
    joined with dots (a non-struct column is itself)."""
    return [(".".join((f.name, *p)), t) for f in fields for p, t in leaf_paths(f.dataType)]


def expand(
    lins: Sequence[ColumnLineage], fields: Sequence[Any]
) -> tuple[list[str], list[ColumnLineage]]:
    """The lineage columns (names, lineage) of user columns ``fields`` (``StructField`` s)
    whose lineage is ``lins``: one per leaf field, each with its field's lineage (the whole
    column's where the fields are not known)."""
    names: list[str] = []
    out: list[ColumnLineage] = []
    for lin, f in zip(lins, fields, strict=True):
        for path, _ in leaf_paths(f.dataType):
            names.append(".".join((f.name, *path)))
            out.append(lin.leaf(path))
    return names, out


def lineage_columns(
    state: FrameState,
) -> tuple[list[str], list[ColumnLineage], list[tuple[str, str]]]:
    """The lineage columns of frame ``state``: names, lineage and ``(name, type)`` schema, one
    per leaf field of its user columns (one JVM call for the schema)."""
    fields = state.df.schema.fields
    user = [fields[p] for p in state.user_positions()]
    lins = [i for i in state.infos if isinstance(i, ColumnLineage)]
    names, out = expand(lins, user)
    return names, out, leaf_schema(user)
