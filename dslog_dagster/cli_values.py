"""The values a ``DSLogIOManager`` keeps by version, loaded for the CLI's commands that re-run or
compare steps (``dslog diff``, ``dslog trace``, ``dslog discover``).

Its own module because those commands read values, which the store does not hold: the IO
manager's ``base_dir`` keeps them, one file (NumPy, pandas) or folder (Spark) per version.
"""

from pathlib import Path
from typing import Any

from dslog_dagster.errors import DSLogError

__all__ = ["values_loader"]


def values_loader(folder: str, *, frames: bool = False) -> Any:
    """A value loader over the values a DSLogIOManager keeps under ``folder`` (its base_dir):
    NumPy arrays, and with ``frames`` DataFrames too (on-demand pandas and Spark steps; a
    Spark frame keeps its row ids and is read by this process's session)."""
    import numpy as np

    from dslog_dagster.core.store import ArrayRecord
    from dslog_dagster.io_managers.value_versions import ValueSlot, asset_stem

    base = Path(folder)
    if not base.is_dir():
        msg = f"No values folder at `{base}`: give the DSLogIOManager's base_dir (--values)."
        raise DSLogError(msg)

    def load(rec: ArrayRecord) -> Any:
        if rec.asset_key is None or rec.version is None:
            return None
        path = ValueSlot(asset_stem(base, rec.asset_key, rec.name)).find(rec.version)
        if path is None:
            return None
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        if frames and path.suffix == ".parquet" and path.is_file():  # a pandas frame
            from dslog_dagster.io_managers.pandas_frames import read_pandas

            return read_pandas(path)
        if frames and path.suffix == ".parquet" and path.is_dir():  # a Spark frame, with ids
            from dslog_dagster.io_managers.spark_frames import load_frame
            from dslog_dagster.spark.session import get_session

            return load_frame(get_session(), path)[0]
        return None

    return load
