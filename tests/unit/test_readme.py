"""The README's Python snippets run as written (docs that match the code)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_snippets_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    exec(compile("\n".join(blocks), str(README), "exec"), {})
    assert (tmp_path / "flipud.dslog.parquet").exists()


def test_readme_opens_with_the_two_commands() -> None:
    head = README.read_text().split("\n## ")[0]
    assert "make demo" in head
    assert "make test" in head
