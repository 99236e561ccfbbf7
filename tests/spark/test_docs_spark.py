"""The docs' Spark blocks (```` ```py ```` fences) run as written, on the suite's session.

Each page's ``py`` blocks run in order as one script, in a temporary working directory, in
this process: the SparkSession is process-wide (``get_session`` in a block returns the suite's).
"""

from pathlib import Path
from typing import Any

import pytest
from docs_snippets import DOCS, blocks, pages, run_in_process


@pytest.mark.parametrize(
    "page", [p for p in pages() if blocks(p, "py")], ids=lambda p: str(p.relative_to(DOCS))
)
def test_page_spark_blocks_run(
    page: Path, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSLOG_STORE", raising=False)
    run_in_process(page, "py", {"__name__": f"docs_{page.stem.replace('-', '_')}"})
