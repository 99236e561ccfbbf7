"""What the store recorded for a materialization, found by its ``dslog/op_id`` metadata.

The metadata carries only the operation id; the array, version, operation name and inputs are
read from the store, the one source of truth (shared by the Dagster and Spark tests)."""

from pathlib import Path
from typing import Any

from dslog_dagster.core.api import DSLog
from dslog_dagster.io_managers import metadata as m


def recorded(store_dir: str | Path, md: dict[str, Any]) -> dict[str, Any]:
    """``array``, ``version``, ``op_name`` and ``inputs`` (name → version) of the operation."""
    op = DSLog(store_dir).store.get_operation(md[m.OP_ID])
    (out,) = op.outputs
    return {
        "array": out.name,
        "version": out.version,
        "op_name": op.op_name,
        "inputs": {a.name: a.version for a in op.inputs},
    }
