"""The README's Spark snippet runs as written (on the suite's session)."""

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_spark_snippet_runs(spark: Any) -> None:
    section = README.read_text().split("\n## Spark\n")[1].split("\n## ")[0]
    blocks = re.findall(r"```py\n(.*?)```", section, re.S)
    assert blocks
    exec(compile("\n".join(blocks), str(README), "exec"), {"__name__": "readme"})
