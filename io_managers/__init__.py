"""Dagster IO managers that store assets together with their cell-level lineage.

Installed as ``dslog_dagster.io_managers``. The Dagster integration (``DSLogIOManager``) is
tracked by the Dagster plugin issue; this package depends on ``dslog_dagster.core`` and
Dagster's public API only.
"""
