"""Exact in-situ lineage queries over compressed tables (``dslog_dagster.core.query``).

* :mod:`~dslog_dagster.core.query.cells` — :class:`CellSet`, the exact set of cells a query
  carries, and :func:`as_cells`, which reads every way of naming cells into one;
* :mod:`~dslog_dagster.core.query.cellspec` — cells spelled as text (configs, command line);
* :mod:`~dslog_dagster.core.query.engine` — hops through lineage tables: :func:`prepare` a
  table once, :func:`run_hops` carries cells through a path in one native call.
"""

from dslog_dagster.core.query.cells import CellSet as CellSet
from dslog_dagster.core.query.cells import as_cells as as_cells
from dslog_dagster.core.query.cells import format_box as format_box
from dslog_dagster.core.query.cells import format_slices as format_slices
from dslog_dagster.core.query.cellspec import cells_from_spec as cells_from_spec
from dslog_dagster.core.query.cellspec import parse_box as parse_box
from dslog_dagster.core.query.engine import Direction as Direction
from dslog_dagster.core.query.engine import PreparedHop as PreparedHop
from dslog_dagster.core.query.engine import QueryEngine as QueryEngine
from dslog_dagster.core.query.engine import check_engine as check_engine
from dslog_dagster.core.query.engine import prepare as prepare
from dslog_dagster.core.query.engine import query_path as query_path
from dslog_dagster.core.query.engine import run_hops as run_hops

__all__ = [
    "CellSet",
    "Direction",
    "PreparedHop",
    "QueryEngine",
    "as_cells",
    "cells_from_spec",
    "check_engine",
    "format_box",
    "format_slices",
    "parse_box",
    "prepare",
    "query_path",
    "run_hops",
]
