"""Lineage-query asset factories, reuse-signature assets, asset checks and schedules.

Installed as ``dslog_dagster.assets``. The factories arrive with the Dagster plugin issue;
this package depends on ``dslog_dagster.core`` and ``dslog_dagster.io_managers`` only.
"""
