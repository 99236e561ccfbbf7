"""Versioned Spark frame values through DSLogIOManager: each materialization is its own
Parquet version that reads back equal to what the step returned, a failed lineage write
changes no stored frame, and the next downstream-only run reads the previous version."""

import gc
import os
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dslog_dagster import DSLogIOManager, tracked_asset
from dslog_dagster.core.store import files as files_module
from dslog_dagster.errors import LineageStorageError, ValueExpiredError
from dslog_dagster.spark.resource import SparkSessionResource

pytestmark = pytest.mark.filterwarnings(
    "ignore:InitResourceContext.dagster_run is deprecated:DeprecationWarning"
)
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
ROUND = {"n": 1}


def _rows(n: int) -> list[tuple[int, str, float]]:
    return [(i, "xyz"[i % 3], i * 0.5 + 10 * n) for i in range(7)]


@tracked_asset
def fsrc(spark: SparkSessionResource) -> DataFrame:
    return spark.get_session().createDataFrame(_rows(ROUND["n"]), "id long, g string, v double")


@tracked_asset
def fmid(fsrc: DataFrame) -> DataFrame:
    return fsrc.filter(F.col("id") % 2 == 0).withColumn("w", F.col("v") * 2)


@tracked_asset
def fout(fmid: DataFrame) -> DataFrame:
    return fmid.withColumn("u", F.col("w") + 1)


ASSETS = [fsrc, fmid, fout]


def _run(io: DSLogIOManager, instance: dg.DagsterInstance, *only: Any, ok: bool = True) -> Any:
    res = dg.materialize(
        ASSETS,
        selection=list(only) or None,
        instance=instance,
        resources={"io_manager": io, "spark": SparkSessionResource(master="local[1]")},
        run_config=QUIET,
        raise_on_error=False,
    )
    assert res.success is ok
    return res


def _tree(root: Path) -> set[str]:
    out = set()
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".dslog"]
        out |= {str(Path(dirpath, f).relative_to(root)) for f in files}
    return out


def test_frame_versions_read_back_and_survive_a_failed_lineage_write(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    io = DSLogIOManager(base_dir=str(data), store_dir=str(data / ".dslog"), keep_last=3)
    with dg.instance_for_test() as instance:
        ROUND["n"] = 1
        first = _run(io, instance).run_id
        ROUND["n"] = 2
        second = _run(io, instance, fsrc).run_id
        # each version reads back as written: same rows, same types, same order of columns
        for n, run in ((1, first), (2, second)):
            back = io.load_value("fsrc", run)
            assert back.schema.simpleString() == "struct<id:bigint,g:string,v:double>"
            assert sorted(tuple(r) for r in back.collect()) == _rows(n)
        mid_v1 = sorted(tuple(r) for r in io.load_value("fmid", first).collect())
        assert [r[0] for r in mid_v1] == [0, 2, 4, 6]
        before = _tree(data)

        real_write = files_module.write_synced

        def read_only(path: Path, blob: bytes, durable: bool = True) -> None:
            if "/.staging/" in str(path):
                msg = "[Errno 30] Read-only file system"
                raise OSError(msg)
            real_write(path, blob, durable)

        monkeypatch.setattr(files_module, "write_synced", read_only)
        failed = _run(io, instance, fmid, ok=False)
        monkeypatch.setattr(files_module, "write_synced", real_write)
        err = str(failed.get_step_failure_events()[0].step_failure_data.error)
        assert LineageStorageError.__name__ in err
        assert _tree(data) == before  # no new version, no leftover staging directory

        third = _run(io, instance, fout).run_id  # reads fmid's first version
        out = sorted(tuple(r) for r in io.load_value("fout", third).collect())
        assert out == [(*r, r[-1] + 1) for r in mid_v1]
        held = io.load_value("fsrc", second)  # a reader still using the second version
        del back
        gc.collect()  # the frames loaded above are gone: their leases end
        ROUND["n"] = 3
        for _ in range(3):  # keep_last=3: the first version goes, the leased second stays
            _run(io, instance, fsrc)
        names = {p.stem for p in (data / "fsrc.versions").glob("*.parquet")}
        assert len(names) == 4
        assert first not in names
        assert second in names
        assert sorted(tuple(r) for r in held.collect()) == _rows(2)  # Spark reads it lazily
        with pytest.raises(ValueExpiredError, match="keep_last=3"):
            io.load_value("fsrc", first)
        del held
        gc.collect()
        _run(io, instance, fsrc)
        names = {p.stem for p in (data / "fsrc.versions").glob("*.parquet")}
        assert len(names) == 3
        assert second not in names
