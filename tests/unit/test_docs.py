"""Every code block of the docs site that can run, runs as written (docs that match the code).

Each page's ```` ```python ```` blocks run in order, as one script, in a fresh interpreter in
a temporary directory; ```` ```py ```` blocks are Spark blocks and run in
``tests/spark/test_docs_spark.py`` on the suite's session. Blocks that are not meant to run use
other languages (``bash``, ``toml``, ``yaml``, ``text``). The examples in the package's
docstrings, which the API reference shows, run as doctests. The site itself is built with
``mkdocs build --strict`` by ``make docs``, which ``make test`` runs before pytest.
"""

import doctest
import importlib
import tomllib
from pathlib import Path

import pytest
from docs_snippets import DOCS, LANGUAGES, ROOT, blocks, languages, pages, run_in_fresh_interpreter


@pytest.mark.parametrize(
    "page", [p for p in pages() if blocks(p, "python")], ids=lambda p: str(p.relative_to(DOCS))
)
def test_page_python_blocks_run(page: Path, tmp_path: Path) -> None:
    run_in_fresh_interpreter(page, "python", tmp_path)


def test_pages_use_known_fence_languages() -> None:
    for page in pages():
        unknown = languages(page) - LANGUAGES
        assert not unknown, f"{page}: fence languages {unknown} (use one of {sorted(LANGUAGES)})"


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in pages():
        assert str(page.relative_to(DOCS)) in nav, f"{page} is not in mkdocs.yml's nav"


def _library_modules() -> list[str]:
    """Every module of the package as installed, from the wheel mapping in pyproject.toml."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["scikit-build"]["wheel"][
        "packages"
    ]
    found = set()
    for target, source in mapping.items():
        for path in (ROOT / source).rglob("*.py"):
            parts = path.relative_to(ROOT / source).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found.add(".".join((*target.split("/"), *parts)))
    return sorted(found)


@pytest.mark.parametrize("name", _library_modules())
def test_docstring_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        skipped = [ex.source for ex in test.examples if ex.options.get(doctest.SKIP)]
        assert not skipped, f"{test.name}: an example that never runs can never fail: {skipped}"
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} docstring example(s) of {name} failed"
