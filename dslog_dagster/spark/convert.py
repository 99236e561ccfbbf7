"""DataFrame → pandas / Arrow / NumPy (and NumPy → DataFrame) with their cell lineage.

A conversion is an operation in the lineage graph like any other: converting a frame asset to
a NumPy matrix yields the matrix *and* the relation ``matrix (i, j) ← frame (row, column)``, so
one query path crosses from a Spark asset to a NumPy asset and back. Rows are ordered by row
id; a frame holding every row id 0..n-1 gives the identity on rows. These conversions bring the
data to the driver by nature (that is what ``toPandas``/``toArrow`` do); the lineage is built
from the row ids and column positions, so it is O(1) ProvRC rows for a dense frame.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dslog_dagster.core.combine import product_table
from dslog_dagster.core.compression import compress
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.errors import InvalidRelationError
from dslog_dagster.extras import require
from dslog_dagster.spark.rowid import ROW_ID

__all__ = ["from_numpy", "to_arrow", "to_numpy", "to_pandas"]


def _frame_and_rows(frame: Any) -> tuple[Any, int]:
    from dslog_dagster.spark.capture import FrameCapture

    if isinstance(frame, FrameCapture):
        return frame.frame_with_row_id, frame.n_rows
    if ROW_ID not in frame.columns:
        msg = (
            f"The frame has no `{ROW_ID}` column, so its rows cannot be named; convert a "
            "FrameCapture or a frame read with `read_frame(..., row_id=True)`."
        )
        raise InvalidRelationError(msg)
    return frame, -1


def _lineage(
    row_ids: npt.NDArray[np.int64], n_in: int, in_cols: Sequence[int], k_in: int
) -> LineageTable:
    n = len(row_ids)
    rows = compress(
        LineageRelation.from_columns((n,), (n_in,), [np.arange(n, dtype=np.int64)], [row_ids])
    )
    cols = compress(
        LineageRelation.from_columns(
            (len(in_cols),), (k_in,), [np.arange(len(in_cols))], [np.asarray(in_cols, np.int64)]
        ),
        fallback="never",
    )
    return product_table(rows, cols)


def to_arrow(
    frame: Any, columns: Sequence[str] | None = None, *, n_rows: int | None = None
) -> tuple[pa.Table, LineageTable]:
    """The frame's ``columns`` (default: all) as an Arrow table ordered by row id, and the
    lineage ``table (i, j) ← frame (row, column)``.

    Args:
        frame: a ``FrameCapture`` or a DataFrame with the ``ROW_ID`` column.
        columns: columns to convert, in the order wanted.
        n_rows: rows of the frame as an array (default: the capture's, or max row id + 1).
    """
    df, n = _frame_and_rows(frame)
    visible = [c for c in df.columns if c != ROW_ID]
    cols = list(columns) if columns is not None else visible
    missing = [c for c in cols if c not in visible]
    if missing:
        msg = f"Columns {missing} are not in the frame ({visible})."
        raise InvalidRelationError(msg)
    table = df.select(*[f"`{c}`" for c in cols], ROW_ID).toArrow().sort_by(ROW_ID)
    ids = table.column(ROW_ID).to_numpy().astype(np.int64)
    if n_rows is not None:
        n = n_rows
    elif n < 0:
        n = int(ids.max()) + 1 if len(ids) else 0
    lineage = _lineage(ids, n, [visible.index(c) for c in cols], len(visible))
    return table.drop_columns([ROW_ID]), lineage


def to_pandas(
    frame: Any, columns: Sequence[str] | None = None, **kwargs: Any
) -> tuple[Any, LineageTable]:
    """Like :func:`to_arrow`, as a pandas DataFrame (index = position, ordered by row id).

    Raises:
        MissingExtraError: pandas is not installed (the ``[pandas]`` extra).
    """
    require("pandas", "to_pandas()")
    table, lineage = to_arrow(frame, columns, **kwargs)
    return table.to_pandas(), lineage


def to_numpy(
    frame: Any, columns: Sequence[str] | None = None, dtype: Any = np.float64, **kwargs: Any
) -> tuple[npt.NDArray[Any], LineageTable]:
    """Like :func:`to_arrow`, as a 2-D NumPy array ``(rows, len(columns))`` of ``dtype``
    (nulls become NaN for float dtypes)."""
    table, lineage = to_arrow(frame, columns, **kwargs)
    cols = [
        np.asarray(table.column(i).to_numpy(zero_copy_only=False), dtype=dtype)
        for i in range(table.num_columns)
    ]
    arr = np.stack(cols, axis=1) if cols else np.zeros((table.num_rows, 0), dtype)
    return arr, lineage


def from_numpy(
    spark: Any, array: npt.ArrayLike, columns: Sequence[str] | None = None
) -> tuple[Any, LineageTable]:
    """A 2-D array as a DataFrame with row ids (row ``i`` = array row ``i``), and the lineage
    ``frame (i, j) ← array (i, j)``."""
    arr = np.asarray(array)
    if arr.ndim != 2:
        msg = f"from_numpy takes a 2-D array, got shape {arr.shape}."
        raise InvalidRelationError(msg)
    names = list(columns) if columns is not None else [f"c{j}" for j in range(arr.shape[1])]
    if len(names) != arr.shape[1]:
        msg = f"{len(names)} column names for {arr.shape[1]} columns."
        raise InvalidRelationError(msg)
    data = {n: arr[:, j] for j, n in enumerate(names)}
    data[ROW_ID] = np.arange(arr.shape[0], dtype=np.int64)
    df = spark.createDataFrame(pa.table(data).to_pandas())
    lineage = _lineage(
        np.arange(arr.shape[0], dtype=np.int64), arr.shape[0], range(arr.shape[1]), arr.shape[1]
    )
    return df, lineage
