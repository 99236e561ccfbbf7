"""Spark steps of the example project (the Spark integration issue adds them here).

Put PySpark assets in ``spark_assets`` and their resources in ``spark_resources``; the
definitions pick both up. Give Spark jobs ``executor_def=dg.in_process_executor`` so one
session is reused (a JVM per step costs ~8 s here).
"""

from typing import Any

import dagster as dg

spark_assets: list[dg.AssetsDefinition] = []
spark_resources: dict[str, Any] = {}
