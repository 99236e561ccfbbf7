"""Capturing and storing NumPy lineage never imports pandas.

The core does not need pandas, and importing it costs over a second in every process (more on
a loaded machine). pyarrow's ``pa.array`` imports it to ask whether a column is a pandas
object, so columnar blobs are built from buffers (:func:`core.format.blob.int64_array`).
DuckDB imports pandas when a query binds parameters, so the catalog's reads and its sync put
values in the SQL text (:mod:`~dslog_dagster.core.store.sql_text`).
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


def test_first_queries_of_a_fresh_process_import_no_pandas(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Open, the catalog's sync, a page of operations, ``prov_query`` and ``lineage_between``
    bind no DuckDB parameters (:mod:`~dslog_dagster.core.store.sql_text`), so a fresh process
    (a Dagster step, a ``dslog`` call) does not pay for importing pandas: neither the first
    process after the writes (it creates and syncs the catalog) nor the next one (directories
    changed in the last seconds are listed again: racy times). Array names with a quote and a
    backslash check that the literals are read back as the names."""
    import numpy as np

    from dslog_dagster.core import LineageRelation
    from dslog_dagster.core.store import LineageStore, NewArray

    root = tmp_path / "store"
    store = LineageStore(root)
    i = np.arange(6)
    rel = LineageRelation.from_columns((6,), (6,), [i], [i])
    names = ["it's", "a\\b", "c"]
    src = store.register_array(names[0], (6,))
    for name in names[1:]:
        src = store.register_operation("step", [src], [NewArray(name, (6,))], {(name, src.name): rel}).outputs[0]  # fmt: skip  # noqa: E501
    program = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        from dslog_dagster.core.api import DSLog

        log = DSLog({str(root)!r})
        assert len(log.store.operations(limit=10)) == 2
        back = log.prov_query({names[::-1]!r}, np.s_[2]).to_indices().tolist()
        fwd = log.lineage_between({names[0]!r}, "c", np.s_[4]).to_indices().tolist()
        print(back, fwd, "pandas" in sys.modules)
        """
    )
    outs = [
        subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
        )
        for _ in range(2)
    ]
    for out in outs:
        assert out.stdout.strip() == "[[2]] [[4]] False", out.stderr[-2000:]
