"""The lineage store (``dslog_dagster.core.store``): arrays, operations and their lineage.

Bottom up: :mod:`~dslog_dagster.core.store.records` (what is stored),
:mod:`~dslog_dagster.core.store.layout` (where), :mod:`~dslog_dagster.core.store.files` (how
files are published), :mod:`~dslog_dagster.core.store.arrays` and
:mod:`~dslog_dagster.core.store.operations` (the files read back),
:mod:`~dslog_dagster.core.store.lineage` (an operation's lineage made ready to store),
:mod:`~dslog_dagster.core.store.catalog` (the DuckDB index of the files),
:mod:`~dslog_dagster.core.store.compaction` (packing small segments) and
:mod:`~dslog_dagster.core.store.store` (:class:`LineageStore`, which coordinates them).
"""

from dslog_dagster.core.store.catalog import LineageCatalog as LineageCatalog
from dslog_dagster.core.store.char_records import CharTableRecord as CharTableRecord
from dslog_dagster.core.store.char_records import StoredCharacters as StoredCharacters
from dslog_dagster.core.store.char_tables import read_characters as read_characters
from dslog_dagster.core.store.compaction import COMPACT_MAX_OP_BYTES as COMPACT_MAX_OP_BYTES
from dslog_dagster.core.store.compaction import COMPACT_PACK_BYTES as COMPACT_PACK_BYTES
from dslog_dagster.core.store.compaction import CompactionResult as CompactionResult
from dslog_dagster.core.store.files import read_store_id as read_store_id
from dslog_dagster.core.store.prepared import PreparedOperation as PreparedOperation
from dslog_dagster.core.store.records import STORE_SCHEMA_VERSION as STORE_SCHEMA_VERSION
from dslog_dagster.core.store.records import ArrayRecord as ArrayRecord
from dslog_dagster.core.store.records import NewArray as NewArray
from dslog_dagster.core.store.records import OperationRecord as OperationRecord
from dslog_dagster.core.store.records import TableRecord as TableRecord
from dslog_dagster.core.store.store import LineageStore as LineageStore

__all__ = [
    "COMPACT_MAX_OP_BYTES",
    "COMPACT_PACK_BYTES",
    "STORE_SCHEMA_VERSION",
    "ArrayRecord",
    "CharTableRecord",
    "CompactionResult",
    "LineageCatalog",
    "LineageStore",
    "NewArray",
    "OperationRecord",
    "PreparedOperation",
    "StoredCharacters",
    "TableRecord",
    "read_characters",
    "read_store_id",
]
