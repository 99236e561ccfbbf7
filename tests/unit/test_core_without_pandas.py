"""Capturing and storing NumPy lineage never imports pandas.

The core does not need pandas, and importing it costs over a second in every process (more on
a loaded machine). pyarrow's ``pa.array`` imports it to ask whether a column is a pandas
object, so columnar blobs are built from buffers (:func:`core.format.blob.int64_array`).
(DuckDB still imports pandas when a catalog query binds parameters: not covered here.)
"""

import subprocess
import sys
import textwrap


def test_capture_and_store_of_unstructured_lineage_import_no_pandas(tmp_path) -> None:  # type: ignore[no-untyped-def]
    program = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        from dslog_dagster.core import capture
        from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
        from dslog_dagster.core.store import LineageStore
        from dslog_dagster.core.store.records import NewArray

        x = np.random.default_rng(0).random(4096)
        result = capture(np.sort, x)  # data-dependent: stored in the columnar encoding
        table = result.tables[(0, 0)]
        assert table.encoding == "columnar", table.encoding
        assert table_from_blob(table_to_blob(table)).decompress() == table.decompress()
        store = LineageStore({str(tmp_path / "store")!r})
        a = store.register_array("x", x.shape, "float64")
        store.register_operation("sort", [a], [NewArray("y", x.shape, "float64")],
                                 {{("y", "x"): table}})
        print("pandas" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False", out.stderr[-2000:]
