"""Character lineage recorded by Dagster Spark steps: ``@tracked_asset(characters=True)``.

A source frame of lines, then ``tokens`` (``explode(split(line, " "))``) and ``words``
(``regexp_extract`` of each token's letters, grouped by word), both asking for characters, are
materialized through ``DSLogIOManager``. A character query from a stored word walks both
stored operations back to the characters of the stored lines, from Python and from the
command line; the brute-force reference finds each word's occurrences with ``re`` in the
stored lines (read back with their row ids, which the store's rows are).
"""

import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.cli import main
from dslog_dagster.core.character_trace import trace_character_range
from dslog_dagster.core.store import LineageStore
from dslog_dagster.io_managers.spark_frames import read_frame
from dslog_dagster.spark import ROW_ID
from dslog_dagster.spark.resource import SparkSessionResource

pytestmark = pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
PATTERN = r"([a-zé]+)\d*"
LINES = ["ab cd1 ab", "x22 zz", "café9 ab7", "cd cd"]


@tracked_asset
def lines(spark: SparkSessionResource) -> DataFrame:
    return spark.get_session().createDataFrame([(s,) for s in LINES], "line string")


@tracked_asset(characters=True)
def tokens(lines: DataFrame) -> DataFrame:
    return lines.select(F.explode(F.split("line", " ")).alias("tok"))


@tracked_asset(characters=True)
def words(tokens: DataFrame) -> DataFrame:
    w = tokens.select(F.regexp_extract("tok", PATTERN, 1).alias("w"))
    return w.groupBy("w").agg(F.count("*").alias("n"))


def _reference(stored: dict[int, str], word: str) -> set[tuple[int, int]]:
    out: set[tuple[int, int]] = set()
    for r, line in stored.items():
        at = 0
        for tok in line.split(" "):
            m = re.search(PATTERN, tok)
            if m is not None and m.group(1) == word:
                out |= {(r, at + m.start(1) + k) for k in range(len(word))}
            at += len(tok) + 1
    return out


def test_spark_steps_store_characters_end_to_end(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    resources = {
        "io_manager": DSLogIOManager(base_dir=str(root), store_dir=str(tmp_path / "store")),
        "spark": SparkSessionResource(master="local[2]"),
    }
    with dg.instance_for_test() as inst:
        res = dg.materialize(
            [lines, tokens, words], instance=inst, resources=resources, run_config=QUIET
        )
        assert res.success
    stored_lines = {
        int(r[ROW_ID]): r["line"]
        for r in read_frame(spark, root / "lines.parquet", row_id=True).collect()
    }
    stored_words = {
        int(r[ROW_ID]): r["w"]
        for r in read_frame(spark, root / "words.parquet", row_id=True).collect()
    }
    assert sorted(stored_words.values()) == ["ab", "café", "cd", "x", "zz"]
    store = LineageStore(tmp_path / "store")
    arr = store.get_array("words")
    for row, word in stored_words.items():
        got = trace_character_range(store, arr, row, "w")
        assert (got.exact, got.hops) == (True, 2), word
        chars = {(x.row, k) for x in got.ranges for k in range(x.start, x.stop or 0)}
        assert {(x.input, x.column, x.whole) for x in got.ranges} == {("lines", "line", False)}
        assert chars == _reference(stored_lines, word), word
    # the command line: characters 1:3 of 'café' are 'af' of line 'café9 ab7'
    cafe = next(r for r, w in stored_words.items() if w == "café")
    line = next(r for r, s in stored_lines.items() if s.startswith("café"))
    argv = ["query", str(tmp_path / "store"), "words", "--cells", f"{cafe},w", "--chars", "1:3"]
    assert main([*argv, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    got_cli = [(r["array"], r["column"], r["row"], r["start"], r["stop"]) for r in json.loads(out)]
    assert got_cli == [("lines", "line", line, 1, 3)]
    assert "over 2 hop(s), exact" in err
