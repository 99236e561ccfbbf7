"""The Spark query path equals the native (in-situ) path on random stores."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from strategies import KINDS, relation_between

from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.query import CellSet
from dslog_dagster.errors import QueryError
from dslog_dagster.spark.query import SparkQueryEngine, run_query


def _random_cells(rng: np.random.Generator, shape: tuple[int, ...]) -> CellSet:
    size = int(np.prod(shape))
    mask = np.zeros(size, bool)
    mask[rng.integers(0, size, size=int(rng.integers(1, 5)))] = True
    cells = CellSet.from_mask(mask.reshape(shape), shape)
    lo = [int(rng.integers(0, n)) for n in shape]
    hi = [int(rng.integers(a, n)) for a, n in zip(lo, shape, strict=True)]
    return cells | CellSet.from_boxes(shape, [lo], [hi])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spark_queries_equal_native_queries_on_random_stores(
    spark: Any, tmp_path: Path, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    log = DSLog(tmp_path / "store")
    n_arrays = 4
    shapes = [
        tuple(int(d) for d in rng.integers(2, 9, size=int(rng.integers(1, 3))))
        for _ in range(n_arrays)
    ]
    arrays = [Array(f"a{i}", s) for i, s in enumerate(shapes)]
    for i in range(1, n_arrays):
        kinds = list(rng.choice(KINDS, size=int(rng.integers(1, 4))))
        rel = relation_between(rng, shapes[i], shapes[i - 1], kinds)
        log.register_operation(
            f"op{i}", [arrays[i - 1]], [arrays[i]], [Lineage(arrays[i], arrays[i - 1], rel)]
        )
    engine = SparkQueryEngine(spark, log)
    paths = [["a3", "a2", "a1", "a0"], ["a0", "a1", "a2", "a3"], ["a1", "a2", "a1", "a0"]]
    for path in paths:
        for _ in range(2):
            cells = _random_cells(rng, shapes[int(path[0][1])])
            assert engine.prov_query(path, cells) == log.prov_query(path, cells), path
    engine.close()


def test_run_query_selects_the_engine(spark: Any, tmp_path: Path) -> None:
    log = DSLog(tmp_path / "s")
    x, y = Array("x", (5, 3)), Array("y", (5,))
    log.register_operation(
        "sum", [x], [y], [Lineage(y, x, [(np.s_[i], np.s_[i, :]) for i in range(5)])]
    )
    want = log.prov_query(["y", "x"], np.s_[1:3])
    assert run_query(log, ["y", "x"], np.s_[1:3], engine="spark", spark=spark) == want
    assert run_query(log, ["y", "x"], np.s_[1:3]) == want
    with pytest.raises(QueryError, match="SparkSession"):
        run_query(log, ["y", "x"], np.s_[1:3], engine="spark")


def test_spark_query_survives_a_compaction_between_lookup_and_read(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark reads lazily: a table looked up before a compaction packs its segment is read
    after it. The engine must not hold a segment path that the compaction deletes."""
    log = DSLog(tmp_path / "s")
    x, y, z = Array("x", (6, 4)), Array("y", (6,)), Array("z", (6,))
    log.register_operation(
        "sum", [x], [y], [Lineage(y, x, [(np.s_[i], np.s_[i, :]) for i in range(6)])]
    )
    log.register_operation(
        "neg", [y], [z], [Lineage(z, y, [(np.s_[i], np.s_[i]) for i in range(6)])]
    )
    want = log.prov_query(["z", "y", "x"], np.s_[2:4])
    engine = SparkQueryEngine(spark, log)
    looked_up = SparkQueryEngine._table_rows
    packed: list[int] = []

    def then_compact(self: SparkQueryEngine, hop: Any) -> Any:
        got = looked_up(self, hop)
        packed.append(log.store.compact().operations)
        return got

    monkeypatch.setattr(SparkQueryEngine, "_table_rows", then_compact)
    assert engine.prov_query(["z", "y", "x"], np.s_[2:4]) == want
    assert packed[0] == 2  # the first hop's segment really moved into a pack
    engine.close()


@pytest.mark.parametrize("inline", [True, False], ids=["boxes-in-task", "range-join"])
def test_both_hop_paths_over_split_tables_equal_native_queries(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline: bool
) -> None:
    """Tables split over several partitions (each partition joins its rows on its own), with
    the query boxes shipped in the task or range-joined in Spark SQL first."""
    from dslog_dagster.spark import query

    monkeypatch.setattr(query, "_ROWS_PER_PARTITION", 3)
    monkeypatch.setattr(query, "BOXES_INLINE", 10**9 if inline else 0)
    rng = np.random.default_rng(11)
    log = DSLog(tmp_path / "store")
    shapes = [(9, 7), (8, 6), (12,)]
    arrays = [Array(f"a{i}", s) for i, s in enumerate(shapes)]
    rows = []
    for i in range(1, len(shapes)):
        # noise (scattered pairs) keeps many rows, so the tables really split
        rel = relation_between(rng, shapes[i], shapes[i - 1], ["noise", "box", "rel"])
        op = log.register_operation(
            f"op{i}", [arrays[i - 1]], [arrays[i]], [Lineage(arrays[i], arrays[i - 1], rel)]
        )
        rows.append(op.table(f"a{i}", f"a{i - 1}").rows)
    assert max(rows) > 3 * 2, rows  # at least one table spans several partitions
    engine = SparkQueryEngine(spark, log)
    for path in (["a2", "a1", "a0"], ["a0", "a1", "a2"]):
        for _ in range(3):
            cells = _random_cells(rng, shapes[int(path[0][1])])
            assert engine.prov_query(path, cells) == log.prov_query(path, cells), path
    engine.close()
