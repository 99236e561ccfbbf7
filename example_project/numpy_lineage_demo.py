"""The main job of `make demo`: a small NumPy pipeline with cell-level lineage, end to end.

Runs a sensor-calibration pipeline on real NumPy data, generates the exact lineage of every step
analytically (the annotated NumPy capture and the Dagster/Spark integration replace this as
they land), compresses it with ProvRC, registers everything in a lineage store and reads every
table back to check it is lossless. Prints what it stored next to a Parquet-zstd file of the
raw (output cell, input cell) pairs.

Usage: python example_project/numpy_lineage_demo.py [STORE_DIR]
"""

import io
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dslog_dagster.core import LineageRelation, LineageStore
from dslog_dagster.core.testing import analytic


def raw_parquet_zstd_bytes(rel: LineageRelation) -> int:
    """Size of the uncompressed relation as a plain Parquet-zstd table (the obvious baseline)."""
    cols = {f"b{j}": c for j, c in enumerate(rel.out_cols)}
    cols |= {f"a{k}": c for k, c in enumerate(rel.in_cols)}
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf, compression="zstd")
    return len(buf.getvalue())


def main(store_dir: Path) -> int:
    if store_dir.exists():
        shutil.rmtree(store_dir)
    store = LineageStore(store_dir)
    rng = np.random.default_rng(42)

    # --- the pipeline (real NumPy values) -------------------------------------------------
    readings = rng.normal(20.0, 3.0, size=(200, 300))  # sensor grid
    offsets = rng.normal(0.0, 0.5, size=(300,))  # per-column calibration
    calibrated = readings + offsets  # broadcasting add
    flipped = np.flipud(calibrated)  # the sensor is mounted upside down
    upsampled = np.repeat(flipped, 2, axis=1)  # match a 600-column display
    column_load = upsampled.sum(axis=0)  # aggregate per display column
    ranked = np.sort(column_load)  # data-dependent: ProvRC falls back when it must

    arrays = {
        "readings": readings,
        "offsets": offsets,
        "calibrated": calibrated,
        "flipped": flipped,
        "upsampled": upsampled,
        "column_load": column_load,
        "ranked": ranked,
    }
    for name, arr in arrays.items():
        store.register_array(name, arr.shape, arr.dtype, version="demo")

    # --- lineage of each step, analytically -----------------------------------------------
    r_read, r_off = analytic.add(readings.shape, offsets.shape)
    steps = [
        (
            "numpy.add",
            ["readings", "offsets"],
            "calibrated",
            {("calibrated", "readings"): r_read, ("calibrated", "offsets"): r_off},
        ),
        (
            "numpy.flipud",
            ["calibrated"],
            "flipped",
            {("flipped", "calibrated"): analytic.flip(calibrated.shape, axis=0)},
        ),
        (
            "numpy.repeat",
            ["flipped"],
            "upsampled",
            {("upsampled", "flipped"): analytic.repeat(flipped.shape, 2, axis=1)},
        ),
        (
            "numpy.sum",
            ["upsampled"],
            "column_load",
            {("column_load", "upsampled"): analytic.sum_axis(upsampled.shape, axis=0)},
        ),
        (
            "numpy.sort",
            ["column_load"],
            "ranked",
            {("ranked", "column_load"): analytic.sort(column_load)},
        ),
    ]

    print(f"dslog demo: lineage store at {store_dir}\n")
    header = (
        f"{'operation':<14} {'lineage':<28} {'pairs':>9} {'rows':>5} {'encoding':>9} "
        f"{'blob B':>9} {'raw pq-zstd B':>13} {'smaller':>8}"
    )
    print(header)
    print("-" * len(header))
    total_stored = total_raw = 0
    for op_name, inputs, output, lineage in steps:
        t0 = time.perf_counter()
        op = store.register_operation(
            op_name, inputs, [output], lineage, args={"demo": True}, capture_method="analytic"
        )
        elapsed = time.perf_counter() - t0
        for (out_name, in_name), rel in lineage.items():
            rec = op.table(out_name, in_name)
            back = store.read_lineage(op, out_name, in_name).decompress()
            if back != rel:
                print(f"ERROR: lineage {out_name} <- {in_name} did not read back exactly")
                return 1
            raw = raw_parquet_zstd_bytes(rel)
            total_stored += rec.stored_bytes
            total_raw += raw
            print(
                f"{op_name:<14} {out_name + ' <- ' + in_name:<28} {rec.n_pairs:>9} "
                f"{rec.rows:>5} {rec.encoding:>9} {rec.stored_bytes:>9} {raw:>13} "
                f"{raw / rec.stored_bytes:>7.0f}x"
            )
        print(f"{'':<14} (registered in {elapsed * 1000:.0f} ms, read back and verified)")
    print("-" * len(header))
    print(
        f"table blobs {total_stored} B vs raw Parquet-zstd {total_raw} B "
        f"({total_raw / total_stored:.0f}x smaller)"
    )
    compacted = store.compact()
    files = [*store.operations_dir.glob("*.parquet"), *store.packs_dir.glob("*.parquet")]
    on_disk = sum(f.stat().st_size for f in files)
    print(
        f"store files after compaction ({compacted.operations} small operation(s) packed): "
        f"{on_disk} B in {len(files)} file(s), records and footers included "
        f"({total_raw / on_disk:.0f}x smaller)\n"
    )

    store.sync()
    ops = store.sql(
        "SELECT op_name, count(*) AS tables FROM lineage_tables GROUP BY op_name ORDER BY op_name"
    )
    print("catalog (DuckDB) lineage tables per operation:")
    for row in ops.to_pylist():
        print(f"  {row['op_name']:<14} {row['tables']}")
    print(f"\nInspect it: .venv/bin/dslog inspect {store_dir}")
    return 0


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".dslog-demo/store")
    sys.exit(main(target))
