"""The hotspot imaging pipeline of the seeds, as a Dagster project with cell-level lineage.

Load it with ``dagster dev -m hotspots.definitions`` from ``example_project/`` (``make ui``), or
materialize it in-process with ``python example_project/hotspots_demo.py`` (``make demo``).
"""
