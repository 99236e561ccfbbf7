"""The DPDS evaluation's preparation pipelines (census, COMPAS, German credit) run end to end
in pandas and on Spark, and the two engines record the same lineage.

Both captures are turned into one vocabulary — ``(output record id, output column, input,
input row, input column)`` — and compared as sets, in both relations. The inputs' rows are
their positions on both engines (the Spark frames carry them as row ids); output rows are
lined up by the record id ``rid`` each pipeline keeps.
"""

from typing import Any

import numpy as np
import pandas as pd
import pytest
from dpds_pipelines import PIPELINES, running_frames, running_pandas, running_spark
from frame_reference import output_rows

from dslog_dagster.pandas import capture_pandas
from dslog_dagster.spark import ROW_ID, capture_frames

Named = set[tuple[int, str, str, int, str]]


def _pandas_named(cap: Any, frames: dict[str, pd.DataFrame], considered: bool) -> Named:
    rids = cap.frame["rid"].to_numpy()
    out_cols = list(cap.frame.columns)
    got: Named = set()
    for name, df in frames.items():
        rel = cap.relation(name, considered=considered)
        for o, j, r, c in rel.unique().pairs().tolist():
            got.add((int(rids[o]), out_cols[j], name, int(r), str(df.columns[c])))
    return got


def _spark_named(cap: Any, considered: bool) -> Named:
    rids = {r[ROW_ID]: r["rid"] for r in output_rows(cap)}
    got: Named = set()
    for inp in cap.inputs:
        rel = cap.relation(inp.name, considered=considered)
        for o, j, r, c in rel.unique().pairs().tolist():
            got.add((int(rids[o]), cap.columns[j], inp.name, int(r), inp.columns[c]))
    return got


def _spark_frame(spark: Any, df: pd.DataFrame) -> Any:
    from pyspark.sql import functions as F

    with_ids = df.assign(**{ROW_ID: np.arange(len(df), dtype=np.int64)})
    records = with_ids.astype(object).where(with_ids.notna(), None).to_dict("records")
    sdf = spark.createDataFrame(records, schema=_schema(with_ids))
    return sdf.withColumn(ROW_ID, F.col(ROW_ID).cast("long"))


def _schema(df: pd.DataFrame) -> str:
    kinds = {"int64": "long", "float64": "double", "object": "string"}
    return ", ".join(f"`{c}` {kinds[str(t)]}" for c, t in df.dtypes.items())


@pytest.mark.parametrize("pipeline", ["census", "compas", "german"])
def test_pandas_and_spark_record_the_same_lineage(spark: Any, pipeline: str) -> None:
    make, in_pandas, on_spark = PIPELINES[pipeline]
    frames = make(40)
    cap = capture_pandas(in_pandas, frames)[0]
    plain = in_pandas(*frames.values())
    pd.testing.assert_frame_equal(cap.frame, plain)  # values equal plain pandas
    scap = capture_frames(on_spark, {k: _spark_frame(spark, v) for k, v in frames.items()})
    assert list(scap.columns) == list(plain.columns)
    assert sorted(r["rid"] for r in output_rows(scap)) == sorted(plain["rid"].tolist())
    assert len(plain) > 5, "the generated data leaves too few rows to compare"
    for considered in (False, True):
        want = _pandas_named(cap, frames, considered)
        got = _spark_named(scap, considered)
        assert got == want, (
            f"{pipeline} (considered={considered}): Spark has {sorted(got - want)[:12]} "
            f"beyond pandas, and lacks {sorted(want - got)[:12]}"
        )


KEYS = ("key1", "key2")
Keyed = set[tuple[Any, ...]]


@pytest.fixture(scope="module")
def running(spark: Any) -> dict[bool, tuple[Keyed, Keyed]]:
    """The DPDS running example on both engines: ``{considered: (pandas, Spark)}`` pairs
    named by content, output rows lined up by their (A, C) values (unique here)."""
    frames = running_frames()
    cap = capture_pandas(running_pandas, frames)[0]
    plain = running_pandas(*frames.values())
    pd.testing.assert_frame_equal(cap.frame, plain)
    scap = capture_frames(running_spark, {k: _spark_frame(spark, v) for k, v in frames.items()})
    assert list(scap.columns) == list(plain.columns)
    key_of = {r[ROW_ID]: (r["A"], r["C"]) for r in output_rows(scap)}
    assert sorted(key_of.values()) == sorted(zip(plain["A"], plain["C"], strict=True))
    pandas_key = list(zip(plain["A"], plain["C"], strict=True))
    out: dict[bool, tuple[Keyed, Keyed]] = {}
    for considered in (True, False):
        want: Keyed = set()
        for name, df in frames.items():
            rel = cap.relation(name, considered=considered)
            for o, j, r, c in rel.unique().pairs().tolist():
                want.add((pandas_key[o], cap.frame.columns[j], name, r, df.columns[c]))
        got: Keyed = set()
        for inp in scap.inputs:
            rel = scap.relation(inp.name, considered=considered)
            for o, j, r, c in rel.unique().pairs().tolist():
                got.add((key_of[o], scap.columns[j], inp.name, r, inp.columns[c]))
        out[considered] = (want, got)
    return out


def _same(want: Keyed, got: Keyed, what: str) -> None:
    assert got == want, (
        f"{what}: Spark has {sorted(got - want)[:12]} beyond pandas, "
        f"and lacks {sorted(want - got)[:12]}"
    )


def test_running_example_considered_lineage_is_equal(
    running: dict[bool, tuple[Keyed, Keyed]],
) -> None:
    _same(*running[True], "considered")


def test_running_example_contributing_lineage_is_equal(
    running: dict[bool, tuple[Keyed, Keyed]],
) -> None:
    """One difference is the program's, not the rules': Spark has no null-safe USING join,
    so the first join's key columns are ``df_A``'s (the left key cell contributes), where
    pandas coalesces the matched keys (both key cells). Those pairs are left out; everything
    else (cells ``fillna`` set to a literal: no contributing cell; the second, USING join's
    keys: both matched key cells) follows the semantics table on both engines."""
    want, got = running[False]
    keys = {p for p in want if p[1] in KEYS and p[2] == "df_B"}
    assert keys, "pandas should coalesce the first join's matched keys"
    _same(want - keys, got, "contributing")
