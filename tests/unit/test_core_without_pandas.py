"""Capturing and storing NumPy lineage never imports pandas.

The core does not need pandas, and importing it costs over a second in every process (more on
a loaded machine). pyarrow's ``pa.array`` imports it to ask whether a column is a pandas
object, so columnar blobs are built from buffers (:func:`core.format.blob.int64_array`).
DuckDB imports pandas when a query binds parameters, so the catalog's reads of a query put
names in the SQL text (:mod:`~dslog_dagster.core.store.sql_text`); its sync still binds them.
"""

import os
import subprocess
import sys
import textwrap
import time

from dslog_dagster.core.store.array_dirs import SETTLE_NS


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
    """Open, a page of operations, ``prov_query`` and ``lineage_between`` (both catalog reads
    of :mod:`~dslog_dagster.core.store.graph`) bind no DuckDB parameters, so a fresh process
    (a Dagster step, a ``dslog`` call) does not pay for importing pandas once the catalog is
    in sync (the first process after writes syncs it, and the sync still binds parameters, so
    the second process is the one checked, on a store whose directories settled). Array names
    with a quote and a backslash check that the literals are read back as the names."""
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
    # A store written a while ago: a sync lists again a directory changed in the last
    # SETTLE_NS (racy times, see core.store.array_dirs), so on a fast machine the second
    # process would re-list, and bind, as the first did.
    old = time.time() - 10 * SETTLE_NS / 1e9
    for d in (root / "arrays").iterdir():
        os.utime(d, (old, old))
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
    assert outs[0].stdout.startswith("[[2]] [[4]] "), outs[0].stderr[-2000:]
    assert outs[1].stdout.strip() == "[[2]] [[4]] False", outs[1].stderr[-2000:]
