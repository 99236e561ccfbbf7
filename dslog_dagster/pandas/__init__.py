"""Cell-level lineage of pandas code (needs the ``[pandas]`` extra).

:func:`capture_pandas` runs a function over :class:`TrackedDataFrame` copies of its input
frames and returns the output with ProvRC tables over cells ``(row position, column
position)`` — the cell space of Spark frames and 2-D arrays — for the contributing and the
considered relation. ``dslog_dagster.core.capture.capture(fn, df)`` and tracked Dagster steps
with DataFrame inputs come here. The supported operations and their rules are listed in
``docs/pandas.md``; anything else raises
:class:`~dslog_dagster.errors.UnsupportedFrameOperationError` naming the method.
"""

from dslog_dagster.extras import require

require("pandas", "pandas capture")

from dslog_dagster.pandas.capture import PandasCapture, capture_pandas  # noqa: E402
from dslog_dagster.pandas.frame import TrackedDataFrame  # noqa: E402
from dslog_dagster.pandas.series import TrackedSeries  # noqa: E402

__all__ = ["PandasCapture", "TrackedDataFrame", "TrackedSeries", "capture_pandas"]
