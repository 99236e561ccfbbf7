"""Exact lineage relations of common NumPy operations, generated analytically.

Each generator returns the lineage relation (:class:`~dslog_dagster.core.LineageRelation`)
that an exact cell-level capture of the named NumPy operation would record: pair
``output[b] ← input[a]`` for every input cell ``a`` that contributed to output cell ``b``.
Multi-input operations return one relation per input, in argument order.

Why this module exists: the compressor, the storage format and the query engine need ground
truth lineage at sizes (10^6–10^8 pairs) where running the annotator would dominate a
benchmark, and tests need a reference that does not depend on the annotator being right. The
relations are built with vectorised index arithmetic (``np.indices``, broadcasting,
``np.repeat``) — no Python loop over cells — and each is checked against a brute-force loop on
small shapes in ``tests/unit/test_analytic.py``.

The generators are grouped by kind: :mod:`.structured` (no data needed),
:mod:`.lanes` (along one axis) and :mod:`.data_dependent`; all are re-exported here.

All index columns are 0-based int64. Shapes are NumPy shapes; ``()`` is a 0-d array. This module
imports neither Dagster nor Spark.
"""

from dslog_dagster.core.testing.analytic.data_dependent import binning as binning
from dslog_dagster.core.testing.analytic.data_dependent import convolve_same as convolve_same
from dslog_dagster.core.testing.analytic.data_dependent import filter_mask as filter_mask
from dslog_dagster.core.testing.analytic.data_dependent import median as median
from dslog_dagster.core.testing.analytic.data_dependent import partition as partition
from dslog_dagster.core.testing.analytic.data_dependent import percentile as percentile
from dslog_dagster.core.testing.analytic.data_dependent import quantile as quantile
from dslog_dagster.core.testing.analytic.data_dependent import sort as sort
from dslog_dagster.core.testing.analytic.data_dependent import unique as unique
from dslog_dagster.core.testing.analytic.lanes import cumulative as cumulative
from dslog_dagster.core.testing.analytic.lanes import delete as delete
from dslog_dagster.core.testing.analytic.lanes import diff as diff
from dslog_dagster.core.testing.analytic.lanes import ediff1d as ediff1d
from dslog_dagster.core.testing.analytic.lanes import gradient as gradient
from dslog_dagster.core.testing.analytic.lanes import insert as insert
from dslog_dagster.core.testing.analytic.lanes import roll as roll
from dslog_dagster.core.testing.analytic.lanes import trapezoid as trapezoid
from dslog_dagster.core.testing.analytic.lanes import unwrap as unwrap
from dslog_dagster.core.testing.analytic.structured import add as add
from dslog_dagster.core.testing.analytic.structured import atleast_1d as atleast_1d
from dslog_dagster.core.testing.analytic.structured import atleast_2d as atleast_2d
from dslog_dagster.core.testing.analytic.structured import broadcast as broadcast
from dslog_dagster.core.testing.analytic.structured import dot as dot
from dslog_dagster.core.testing.analytic.structured import elementwise as elementwise
from dslog_dagster.core.testing.analytic.structured import flip as flip
from dslog_dagster.core.testing.analytic.structured import moveaxis as moveaxis
from dslog_dagster.core.testing.analytic.structured import negative as negative
from dslog_dagster.core.testing.analytic.structured import ravel as ravel
from dslog_dagster.core.testing.analytic.structured import repeat as repeat
from dslog_dagster.core.testing.analytic.structured import reshape as reshape
from dslog_dagster.core.testing.analytic.structured import rot90 as rot90
from dslog_dagster.core.testing.analytic.structured import sum_axis as sum_axis
from dslog_dagster.core.testing.analytic.structured import swapaxes as swapaxes
from dslog_dagster.core.testing.analytic.structured import tile as tile
from dslog_dagster.core.testing.analytic.structured import transpose as transpose

__all__ = [
    "add",
    "atleast_1d",
    "atleast_2d",
    "binning",
    "broadcast",
    "convolve_same",
    "cumulative",
    "delete",
    "diff",
    "dot",
    "ediff1d",
    "elementwise",
    "filter_mask",
    "flip",
    "gradient",
    "insert",
    "median",
    "moveaxis",
    "negative",
    "partition",
    "percentile",
    "quantile",
    "ravel",
    "repeat",
    "reshape",
    "roll",
    "rot90",
    "sort",
    "sum_axis",
    "swapaxes",
    "tile",
    "transpose",
    "trapezoid",
    "unique",
    "unwrap",
]
