"""The example Dagster project with cell-level lineage: the seeds' hotspot imaging pipeline
(NumPy, ``hotspot_job``) and the ICDE relational pipeline on PySpark feeding NumPy steps
(``titles_job``, ``hotspots/spark.py``).

Load it with ``dagster dev -m hotspots.definitions`` from ``example_project/`` (``make ui``), or
materialize it in-process with ``python example_project/hotspots_demo.py`` and
``python example_project/titles_demo.py`` (both run by ``make demo``).
"""
