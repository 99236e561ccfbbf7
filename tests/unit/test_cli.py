"""The `dslog` command line follows the conventions of `git`/`duckdb`: version, help with
examples, output formats, a quiet exit on a closed pipe, documented exit codes, and no store
created by accident."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dslog_dagster import __version__
from dslog_dagster.cli import EXIT_CODES, main
from dslog_dagster.core.api import Array, DSLog, Lineage


@pytest.fixture
def store(tmp_path: Path) -> str:
    """x --flipud--> y --sum over rows--> s."""
    root = tmp_path / "store"
    log = DSLog(root)
    x, y, s = Array("x", (3, 4)), Array("y", (3, 4)), Array("s", (4,))
    log.register_operation("flipud", [x], [y], [Lineage(y, x, lambda b: [(2 - b[0], b[1])])])
    log.register_operation(
        "sum0", [y], [s], [Lineage(s, y, [(slice(j, j + 1), (slice(None), j)) for j in range(4)])]
    )
    return str(root)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version_and_bare_call(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"dslog {__version__}"
    code, out, _ = run(capsys)
    assert code == 0
    assert "usage: dslog" in out
    for command in ("init", "inspect", "sql", "rebuild-catalog", "query", "compact"):
        assert command in out
    for exit_code in EXIT_CODES:
        assert f"  {exit_code} " in out


@pytest.mark.parametrize(
    "command", ["init", "inspect", "sql", "rebuild-catalog", "query", "compact"]
)
def test_every_subcommand_has_help_with_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    examples = out.split("examples:\n", 1)[1]
    assert f"dslog {command} " in examples


def test_a_folder_that_is_not_a_store_is_refused_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "values.npy").write_bytes(b"x")
    for argv in (["inspect"], ["sql", "SELECT 1"], ["query", "a", "b"], ["compact"]):
        code, out, err = run(capsys, argv[0], str(data), *argv[1:])
        assert code == 2
        assert "is not a lineage store" in err
        assert "dslog init" in err
        assert out == ""
    assert sorted(p.name for p in data.iterdir()) == ["values.npy"]
    code, _, err = run(capsys, "inspect", str(tmp_path / "missing"))
    assert (code, "not a directory") == (2, err.split("(")[1].split(")")[0])
    assert not (tmp_path / "missing").exists()


def test_init_creates_a_store_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "new"
    code, out, _ = run(capsys, "init", str(root))
    assert code == 0
    assert out.startswith("created an empty lineage store at ")
    code, out, _ = run(capsys, "init", str(root))
    assert (code, out.split(" at ")[0]) == (0, "already a lineage store")
    code, out, _ = run(capsys, "inspect", str(root))
    assert code == 0
    assert "0 array(s)" in out
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, _, err = run(capsys, "init", str(a_file))
    assert code == 2
    assert "not a directory" in err


def test_inspect_formats(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", store)
    assert code == 0
    assert "2 operation(s)" in out
    assert "flipud(x) -> y" in out
    code, out, _ = run(capsys, "inspect", store, "--format", "json")
    doc = json.loads(out)
    assert [a["name"] for a in doc["arrays"]] == ["s", "x", "y"]
    assert [(o["op_name"], o["inputs"], o["outputs"]) for o in doc["operations"]] == [
        ("flipud", ["x"], ["y"]),
        ("sum0", ["y"], ["s"]),
    ]
    assert doc["operations"][1]["tables"][0]["pairs"] == 12
    code, out, _ = run(capsys, "inspect", store, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["op_name"], r["output"], r["input"], r["pairs"]) for r in rows] == [
        ("flipud", "y", "x", "12"),
        ("sum0", "s", "y", "12"),
    ]


def test_sql_formats(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    query = "SELECT op_name, n_pairs FROM lineage_tables ORDER BY op_name"
    code, out, _ = run(capsys, "sql", store, query)
    assert code == 0
    assert [line.split() for line in out.splitlines()] == [
        ["op_name", "n_pairs"],
        ["flipud", "12"],
        ["sum0", "12"],
    ]
    _, out, _ = run(capsys, "sql", store, query, "--format", "json")
    assert json.loads(out) == [
        {"op_name": "flipud", "n_pairs": 12},
        {"op_name": "sum0", "n_pairs": 12},
    ]
    _, out, _ = run(capsys, "sql", store, query, "--format", "csv")
    assert out == "op_name,n_pairs\nflipud,12\nsum0,12\n"


def test_query_formats(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("query", store, "s", "y", "x", "--cells", "1")
    code, out, err = run(capsys, *argv)
    assert code == 0
    assert [line.split() for line in out.splitlines()] == [
        ["start_0", "stop_0", "start_1", "stop_1"],
        ["0", "3", "1", "2"],
    ]
    assert "3 cell(s) in 1 box(es)" in err
    _, out, _ = run(capsys, *argv, "--format", "json")
    assert json.loads(out) == [{"start_0": 0, "stop_0": 3, "start_1": 1, "stop_1": 2}]
    _, out, _ = run(capsys, *argv, "--format", "csv")
    assert out == "start_0,stop_0,start_1,stop_1\n0,3,1,2\n"
    _, out, _ = run(capsys, *argv, "--count", "--format", "json")
    assert json.loads(out) == {"cells": 3}


def test_query_errors_say_what_to_do(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "query", store, "s", "x", "--cells", "1")
    assert code == 2
    assert "--between" in err
    assert "lineage_between('s', 'x')" in err
    code, _, err = run(capsys, "query", store, "s")
    assert code == 2
    assert "at least two arrays" in err
    target = tmp_path / "no-such-folder" / "out.parquet"
    code, _, err = run(capsys, "query", store, "s", "y", "--output", str(target))
    assert code == 2
    assert "does not exist; create it" in err
    assert not target.parent.exists()


def test_a_closed_pipe_ends_quietly_with_141(store: str) -> None:
    # far more than a pipe buffer holds, so the writer is still writing when the reader stops
    query = "SELECT i AS cell, i * 2 AS twice FROM range(300000) t(i)"
    script = (
        f"import sys; from dslog_dagster.cli import main; sys.exit(main({['sql', store, query]!r}))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().split() == [b"cell", b"twice"]
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err
    assert b"BrokenPipe" not in err
