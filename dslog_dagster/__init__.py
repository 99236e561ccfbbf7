"""dslog-dagster: cell-level lineage for array and dataframe pipelines.

The engine lives in :mod:`dslog_dagster.core` (no Dagster or Spark needed); Dagster IO
managers in :mod:`dslog_dagster.io_managers`; lineage-query assets in
:mod:`dslog_dagster.assets`.

The Dagster-facing names (``tracked_asset``, ``tracked_multi_asset``, ``tracked_op``,
``DSLogResource``, ``DSLogIOManager``, ``with_lineage``, ``plain``) are imported lazily on first
access, so ``import dslog_dagster.core`` never imports Dagster.
"""

import importlib
from typing import TYPE_CHECKING, Any

from dslog_dagster.errors import CompressionError as CompressionError
from dslog_dagster.errors import ConfigurationError as ConfigurationError
from dslog_dagster.errors import DamagedStoreWarning as DamagedStoreWarning
from dslog_dagster.errors import DSLogError as DSLogError
from dslog_dagster.errors import InvalidRelationError as InvalidRelationError
from dslog_dagster.errors import LineageCorruptError as LineageCorruptError
from dslog_dagster.errors import LineageNotFoundError as LineageNotFoundError
from dslog_dagster.errors import LineageStorageError as LineageStorageError
from dslog_dagster.errors import QueryError as QueryError
from dslog_dagster.errors import SchemaVersionError as SchemaVersionError
from dslog_dagster.errors import UnsupportedArrayError as UnsupportedArrayError
from dslog_dagster.errors import ValueExpiredError as ValueExpiredError

if TYPE_CHECKING:
    from dslog_dagster.decorators import tracked_asset as tracked_asset
    from dslog_dagster.decorators import tracked_multi_asset as tracked_multi_asset
    from dslog_dagster.decorators import tracked_op as tracked_op
    from dslog_dagster.io_managers import DSLogIOManager as DSLogIOManager
    from dslog_dagster.io_managers import with_lineage as with_lineage
    from dslog_dagster.resources import DSLogResource as DSLogResource
    from dslog_dagster.values import plain as plain

from dslog_dagster._version import __version__ as __version__

_LAZY = {
    "tracked_asset": "dslog_dagster.decorators",
    "tracked_multi_asset": "dslog_dagster.decorators",
    "tracked_op": "dslog_dagster.decorators",
    "plain": "dslog_dagster.values",
    "DSLogResource": "dslog_dagster.resources",
    "DSLogIOManager": "dslog_dagster.io_managers",
    "with_lineage": "dslog_dagster.io_managers",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'dslog_dagster' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CompressionError",
    "ConfigurationError",
    "DSLogError",
    "DSLogIOManager",
    "DSLogResource",
    "DamagedStoreWarning",
    "InvalidRelationError",
    "LineageCorruptError",
    "LineageNotFoundError",
    "LineageStorageError",
    "QueryError",
    "SchemaVersionError",
    "UnsupportedArrayError",
    "ValueExpiredError",
    "__version__",
    "plain",
    "tracked_asset",
    "tracked_multi_asset",
    "tracked_op",
    "with_lineage",
]
