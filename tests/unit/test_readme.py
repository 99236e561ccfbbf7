"""The README opens with the two commands, stays short, runs as written and links to pages that
exist (docs that match the code)."""

import re
from pathlib import Path

from docs_snippets import README, ROOT, blocks, run_in_fresh_interpreter


def test_readme_snippets_run(tmp_path: Path) -> None:
    assert blocks(README, "python")
    run_in_fresh_interpreter(README, "python", tmp_path)
    assert (tmp_path / "data" / ".dslog").is_dir()  # the example's lineage store


def test_readme_opens_with_the_two_commands() -> None:
    head = README.read_text().split("\n## ")[0]
    assert "make demo" in head
    assert "make test" in head


def test_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 150


def test_readme_links_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert local
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
