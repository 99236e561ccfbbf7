"""pandas DataFrames on disk with the row ids their lineage names.

A tracked step's pandas output is stored as one Parquet file (zstd) with one extra column,
``ROW_ID`` (``0..n-1``, the row positions the output's lineage names; the same column name the
Spark frames use). Reading sorts by it and drops it, so the frame user code gets has its rows
in the positions the lineage names even when the file was rewritten or another tool reordered
it. A file whose ids are not exactly ``0..n-1`` is refused: its rows could not be named.
"""

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dslog_dagster.errors import LineageCorruptError, UnsupportedArrayError

__all__ = ["ROW_ID", "from_stored", "read_pandas", "schema_of", "with_row_ids", "write_pandas"]

ROW_ID = "__dslog_row_id"
"""The row-id column (the Spark frames' ``dslog_dagster.spark.ROW_ID`` has the same name)."""


def schema_of(df: pd.DataFrame) -> list[tuple[str, str]]:
    """``(column name, dtype)`` per column (what the store and Dagster's column schema show)."""
    return [(str(c), str(t)) for c, t in df.dtypes.items()]


def with_row_ids(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` plus ``ROW_ID`` = its row positions."""
    if ROW_ID in df.columns:
        msg = f"The frame already has a column `{ROW_ID}` (dslog's row-id column); rename it."
        raise UnsupportedArrayError(msg)
    return df.assign(**{ROW_ID: np.arange(len(df), dtype=np.int64)})


def from_stored(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """The frame with its rows in id order and without ``ROW_ID``.

    Raises:
        LineageCorruptError: the ids are not exactly ``0..n-1``.
    """
    ids = np.asarray(df[ROW_ID].to_numpy())
    order = np.argsort(ids, kind="stable")
    if not np.array_equal(ids[order], np.arange(len(df))):
        msg = (
            f"The row ids of `{where}` are not 0..{len(df) - 1}, so the rows its lineage names "
            "cannot be found; the file was changed outside dslog. Materialize the asset again."
        )
        raise LineageCorruptError(msg)
    if not np.array_equal(order, np.arange(len(df))):
        df = df.iloc[order]
    return df.drop(columns=[ROW_ID])


def write_pandas(df: pd.DataFrame, path: Path) -> None:
    """Store ``df`` with its row ids at ``path`` (one Parquet file, zstd).

    Raises:
        UnsupportedArrayError: Parquet cannot hold a column (mixed types in one column,
            labels that are not strings).
    """
    import pyarrow as pa

    try:
        with_row_ids(df).to_parquet(path, compression="zstd")
    except (pa.ArrowException, ValueError, TypeError) as e:
        msg = (
            f"The frame cannot be stored as Parquet ({e}). Give each column one type (e.g. "
            "`astype(str)` a column that mixes text and numbers) and string column labels."
        )
        raise UnsupportedArrayError(msg) from e


def read_pandas(path: Path) -> Any:
    """The frame stored by :func:`write_pandas` (rows in id order, ids dropped)."""
    return from_stored(pd.read_parquet(path), str(path))
