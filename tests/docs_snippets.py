"""The code blocks of the README and the docs pages, and how the docs tests run them.

A page's blocks of one fence language form one script, each block at its own line of the page
(everything else is blank lines), so a traceback names the page and the line a reader sees.
``python`` blocks run in a fresh interpreter per page (as a reader would run them: no state
left by another page, e.g. process-wide store handles keyed by a relative path); ``py`` blocks
need a SparkSession and run in-process on the suite's ``spark`` fixture.
"""

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.S | re.M)
# Fence languages a page may use: python (runs), py (runs on Spark), the rest never run.
LANGUAGES = frozenset({"python", "py", "bash", "text", "toml", "yaml"})

# Dagster initialises a nested resource (DSLogIOManager's `dslog`) through its own deprecated
# InitResourceContext.dagster_run; the same filter is in pyproject.toml's pytest settings.
_DAGSTER_OWN_WARNING = "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
# After the page's code has run: do what the interpreter does at exit (threading's shutdown:
# its exit hooks, e.g. executors', then joining non-daemon threads; the atexit handlers),
# flush, and leave with os._exit. The interpreter's own teardown is skipped because pyarrow
# 26.0.1 aborts in it ("terminate called without an active exception", exit 134) in about 1
# process of 5 on a loaded machine once a Parquet file has been read: reproduced with nothing
# but `pq.write_table(...); pq.read_table(...)`. A page's error still fails the test.
_RUNNER = (
    "import atexit, os, pathlib, sys, threading; code = pathlib.Path(sys.argv[1]).read_text(); "
    "exec(compile(code, sys.argv[2], 'exec'), {'__name__': '__main__'}); "
    "threading._shutdown(); "
    "atexit._run_exitfuncs(); sys.stdout.flush(); sys.stderr.flush(); os._exit(0)"
)


# A ```python block right after `<!-- dslog-project: NAME -->` belongs to project NAME
# (CONTRIBUTING.md, "Docs"); tests/dagster/test_docs_project.py builds each project.
PROJECT_MARK = re.compile(r"^<!-- dslog-project: ([\w-]+) -->\n```python\n(.*?)^```", re.S | re.M)
PROJECT_SOURCES = (README, DOCS / "getting-started.md", DOCS / "dagster.md")
"""Where project snippets are looked for, in the order their blocks join a project."""


def projects() -> dict[str, list[tuple[Path, int, str]]]:
    """Each project's blocks as (page, line of the block's first code line, code), in order."""
    found: dict[str, list[tuple[Path, int, str]]] = {}
    for page in PROJECT_SOURCES:
        text = page.read_text()
        for m in PROJECT_MARK.finditer(text):
            line = text.count("\n", 0, m.start(2)) + 1
            found.setdefault(m.group(1), []).append((page, line, m.group(2)))
    return found


def pages() -> list[Path]:
    """Every page of the docs site."""
    return sorted(DOCS.rglob("*.md"))


def languages(page: Path) -> set[str]:
    return {lang for lang, _ in FENCE.findall(page.read_text())}


def blocks(page: Path, language: str) -> list[str]:
    """The code of every fenced block of ``language`` on ``page``, in order."""
    return [code for lang, code in FENCE.findall(page.read_text()) if lang == language]


def script(page: Path, language: str) -> str:
    """The page's ``language`` blocks as one script, each block at its own line of the page."""
    text = page.read_text()
    lines = [""] * (text.count("\n") + 1)
    for m in FENCE.finditer(text):
        if m.group(1) == language:
            first = text.count("\n", 0, m.start(2))
            for k, line in enumerate(m.group(2).splitlines()):
                lines[first + k] = line
    return "\n".join(lines)


def run_in_fresh_interpreter(page: Path, language: str, cwd: Path) -> None:
    """Run the page's blocks as ``__main__`` of a new Python in ``cwd``; fail with its output."""
    code = cwd / f"_{page.stem}_{language}.py"
    code.write_text(script(page, language))
    env = {k: v for k, v in os.environ.items() if k != "DSLOG_STORE"}
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-W",
            _DAGSTER_OWN_WARNING,
            "-c",
            _RUNNER,
            str(code),
            str(page),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{page} ({language} blocks) failed:\n{done.stderr[-4000:]}"


def run_in_process(page: Path, language: str, namespace: dict[str, Any]) -> None:
    """Run the page's blocks in this interpreter (Spark blocks: the session is the suite's)."""
    exec(compile(script(page, language), str(page), "exec"), namespace)
