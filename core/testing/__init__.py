"""Test oracles and baselines for dslog (``dslog_dagster.core.testing``), as ``polars.testing``.

No library module imports this package: the tests and benchmarks do, and they ship with the
engine so that a user's own tests can use them too.

* :mod:`~dslog_dagster.core.testing.analytic` — exact lineage of common NumPy operations,
  built by index arithmetic: ground truth for the compressor, the storage format, the query
  engine and the annotator.
* :mod:`~dslog_dagster.core.testing.baselines` — the query baselines ProvRC is measured
  against (DuckDB over raw tables and Parquet, NumPy ``isin``) and the naive join that the
  query tests compare every hop with.
"""
