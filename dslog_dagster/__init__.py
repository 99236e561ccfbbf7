"""dslog-dagster: cell-level lineage for array and dataframe pipelines.

The engine lives in :mod:`dslog_dagster.core` (no Dagster or Spark needed); Dagster IO
managers in :mod:`dslog_dagster.io_managers`; lineage-query assets in
:mod:`dslog_dagster.assets`.
"""

from dslog_dagster.errors import CompressionError as CompressionError
from dslog_dagster.errors import DSLogError as DSLogError
from dslog_dagster.errors import InvalidRelationError as InvalidRelationError
from dslog_dagster.errors import LineageNotFoundError as LineageNotFoundError
from dslog_dagster.errors import LineageStorageError as LineageStorageError
from dslog_dagster.errors import QueryError as QueryError
from dslog_dagster.errors import SchemaVersionError as SchemaVersionError
from dslog_dagster.errors import UnsupportedArrayError as UnsupportedArrayError

__version__ = "0.1.0"

__all__ = [
    "CompressionError",
    "DSLogError",
    "InvalidRelationError",
    "LineageNotFoundError",
    "LineageStorageError",
    "QueryError",
    "SchemaVersionError",
    "UnsupportedArrayError",
    "__version__",
]
