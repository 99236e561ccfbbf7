"""The dslog engine, independent of Dagster and Spark (``dslog_dagster.core``).

* :mod:`~dslog_dagster.core.native` — the one module that imports the compiled extensions.
* :mod:`~dslog_dagster.core.relation` — validated lineage relations (any rank, int64).
* :mod:`~dslog_dagster.core.capture` — annotated execution with the ``tracked_float`` dtype.
* :mod:`~dslog_dagster.core.provrc` — lineage tables: the ProvRC algorithm, exact
  decompression, both orientations.
* :mod:`~dslog_dagster.core.combine` — exact algebra on tables (merges, products, factored
  tables).
* :mod:`dslog_dagster.core.format` — how tables are stored: encodings, table files, blobs,
  segments.
* :mod:`~dslog_dagster.core.compression` — what is stored for a relation: ProvRC or the
  columnar encoding, whichever is smaller on disk.
* :mod:`dslog_dagster.core.store` — the lineage store and its embedded DuckDB catalog.
* :mod:`dslog_dagster.core.query` — exact cell sets and in-situ queries over tables.
* :mod:`~dslog_dagster.core.api` — the DSLog session API over a store.
* :mod:`~dslog_dagster.core.trace` — carry cells through every operation upstream or
  downstream of an array version.
* :mod:`~dslog_dagster.core.provenance_queries` — the DPDS canned provenance queries (why,
  how, history, spread, invalidated) at item, record and feature granularity.
* :mod:`~dslog_dagster.core.change` — explain a change between two versions of an array
  (PROVision's version-inconsistency tracing).
* :mod:`dslog_dagster.core.testing` — test oracles and query baselines (not used by the
  library).
* :mod:`dslog_dagster.core.reuse` — provenance views: base/dim/gen keys, generalised
  ProvRC templates, sampled verification and the view registry that predicts, confirms and
  serves them (it wraps ``capture``; ``capture`` knows nothing of it).
"""

import importlib
from typing import TYPE_CHECKING, Any

# Imported now, not on first use: the submodule `capture` has the function's name, and Python
# binds a submodule to its package's attribute whenever it is first imported, which would
# replace the function a lazy lookup had put there.
from dslog_dagster.core.capture import capture as capture

if TYPE_CHECKING:
    from dslog_dagster.core.capture import TRACKED_FLOAT as TRACKED_FLOAT
    from dslog_dagster.core.capture import Capture as Capture
    from dslog_dagster.core.capture import CaptureResult as CaptureResult
    from dslog_dagster.core.change import ChangeExplanation as ChangeExplanation
    from dslog_dagster.core.change import explain_change as explain_change
    from dslog_dagster.core.compression import compress as compress
    from dslog_dagster.core.format.table_file import SCHEMA_VERSION as SCHEMA_VERSION
    from dslog_dagster.core.format.table_file import read_table as read_table
    from dslog_dagster.core.format.table_file import write_table as write_table
    from dslog_dagster.core.provrc import ForwardTable as ForwardTable
    from dslog_dagster.core.provrc import LineageTable as LineageTable
    from dslog_dagster.core.relation import LineageRelation as LineageRelation
    from dslog_dagster.core.reuse import GenTemplate as GenTemplate
    from dslog_dagster.core.reuse import ReusePolicy as ReusePolicy
    from dslog_dagster.core.reuse import ViewInfo as ViewInfo
    from dslog_dagster.core.reuse import ViewRegistry as ViewRegistry
    from dslog_dagster.core.reuse import base_sig as base_sig
    from dslog_dagster.core.reuse import code_identity as code_identity
    from dslog_dagster.core.reuse import dim_sig as dim_sig
    from dslog_dagster.core.reuse import gen_sig as gen_sig
    from dslog_dagster.core.store import ArrayRecord as ArrayRecord
    from dslog_dagster.core.store import LineageCatalog as LineageCatalog
    from dslog_dagster.core.store import LineageStore as LineageStore
    from dslog_dagster.core.store import NewArray as NewArray
    from dslog_dagster.core.store import OperationRecord as OperationRecord
    from dslog_dagster.core.store import PreparedOperation as PreparedOperation

_EXPORTS: dict[str, tuple[str, str]] = {
    "TRACKED_FLOAT": ("dslog_dagster.core.capture", "TRACKED_FLOAT"),
    "Capture": ("dslog_dagster.core.capture", "Capture"),
    "CaptureResult": ("dslog_dagster.core.capture", "CaptureResult"),
    "ChangeExplanation": ("dslog_dagster.core.change", "ChangeExplanation"),
    "explain_change": ("dslog_dagster.core.change", "explain_change"),
    "compress": ("dslog_dagster.core.compression", "compress"),
    "SCHEMA_VERSION": ("dslog_dagster.core.format.table_file", "SCHEMA_VERSION"),
    "read_table": ("dslog_dagster.core.format.table_file", "read_table"),
    "write_table": ("dslog_dagster.core.format.table_file", "write_table"),
    "ForwardTable": ("dslog_dagster.core.provrc", "ForwardTable"),
    "LineageTable": ("dslog_dagster.core.provrc", "LineageTable"),
    "LineageRelation": ("dslog_dagster.core.relation", "LineageRelation"),
    "GenTemplate": ("dslog_dagster.core.reuse", "GenTemplate"),
    "ReusePolicy": ("dslog_dagster.core.reuse", "ReusePolicy"),
    "ViewInfo": ("dslog_dagster.core.reuse", "ViewInfo"),
    "ViewRegistry": ("dslog_dagster.core.reuse", "ViewRegistry"),
    "base_sig": ("dslog_dagster.core.reuse", "base_sig"),
    "code_identity": ("dslog_dagster.core.reuse", "code_identity"),
    "dim_sig": ("dslog_dagster.core.reuse", "dim_sig"),
    "gen_sig": ("dslog_dagster.core.reuse", "gen_sig"),
    "ArrayRecord": ("dslog_dagster.core.store", "ArrayRecord"),
    "LineageCatalog": ("dslog_dagster.core.store", "LineageCatalog"),
    "LineageStore": ("dslog_dagster.core.store", "LineageStore"),
    "NewArray": ("dslog_dagster.core.store", "NewArray"),
    "OperationRecord": ("dslog_dagster.core.store", "OperationRecord"),
    "PreparedOperation": ("dslog_dagster.core.store", "PreparedOperation"),
}
"""Where each name of :data:`__all__` lives. They are imported on first use (PEP 562), so a
process that needs one part of the engine (a Spark worker decoding a table, the CLI answering
a query) does not import all of it: the whole engine takes ~0.6 s to import."""


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        msg = f"module 'dslog_dagster.core' has no attribute {name!r}"
        raise AttributeError(msg) from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "SCHEMA_VERSION",
    "TRACKED_FLOAT",
    "ArrayRecord",
    "Capture",
    "CaptureResult",
    "ChangeExplanation",
    "ForwardTable",
    "GenTemplate",
    "LineageCatalog",
    "LineageRelation",
    "LineageStore",
    "LineageTable",
    "NewArray",
    "OperationRecord",
    "PreparedOperation",
    "ReusePolicy",
    "ViewInfo",
    "ViewRegistry",
    "base_sig",
    "capture",
    "code_identity",
    "compress",
    "dim_sig",
    "explain_change",
    "gen_sig",
    "read_table",
    "write_table",
]
