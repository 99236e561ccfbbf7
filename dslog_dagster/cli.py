"""`dslog` command line: look into a lineage store without writing Python.

dslog init STORE               create an empty lineage store
dslog inspect STORE            arrays, operations and lineage tables with their sizes
dslog sql STORE "SELECT ..."   read-only SQL over the DuckDB catalog
dslog rebuild-catalog STORE    rebuild the catalog from the lineage files
dslog query STORE A B [C ...] --cells "0:10,3"
                               cells of the last array linked to cells of the first; asset
                               keys are array names (images/smoothed, counts[2026-11-21])
dslog query STORE A B --between
                               union over every path from A to B, as the query assets do
dslog query ... --engine spark  the same answer computed by range joins on Spark (local)
dslog compact STORE            pack the files of small operations into shared pack files
dslog fsck STORE [--quarantine]
                               check every file's checksum; move damaged files aside

Why the conventions of `git` and `duckdb`: a data engineer pipes this tool into `head`, `jq`
and spreadsheets, so results go to stdout in the format asked for (``--format table|json|csv``),
everything else (resolved plans, counts, progress) to stderr, a closed pipe ends quietly, and
the exit code says what happened (see :data:`EXIT_CODES`). Only ``init`` creates a store: a
typo in a path must not leave an empty store behind and report success.
"""

import argparse
import csv
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dslog_dagster._version import __version__
from dslog_dagster.errors import DSLogError, LineageStorageError

if TYPE_CHECKING:
    from dslog_dagster.core.store import LineageStore
    from dslog_dagster.core.store.records import TableRecord

#: What each exit code of ``dslog`` means (also in docs/cli.md).
EXIT_CODES = {
    0: "success",
    1: "nothing done (another compaction of the store was running)",
    2: "bad usage, or an error of the store or the query (the message says what to do)",
    3: "`dslog fsck` found damaged files (listed; `--quarantine` moves them aside)",
    141: "stdout was closed early (e.g. piped into `head`); 128 + SIGPIPE, as shells report",
}

FORMATS = ("table", "json", "csv")

Rows = list[dict[str, Any]]


def _is_store(root: Path) -> bool:
    from dslog_dagster.core.store import read_store_id

    return read_store_id(root) is not None


def _store(path: str) -> "LineageStore":
    """The store at ``path``; refuses a folder that is not one (only ``init`` creates)."""
    from dslog_dagster.core.store import LineageStore
    from dslog_dagster.core.store.object_backends import is_url

    if is_url(path):  # a store on object storage (`s3://bucket/prefix`)
        return LineageStore(path)
    root = Path(path)
    if not root.is_dir():
        msg = (
            f"No lineage store at `{root}` (not a directory). Create one with "
            f"`dslog init {path}`, or give the folder DSLogResource(store_dir=...) points at."
        )
        raise DSLogError(msg)
    if not _is_store(root):
        msg = (
            f"`{root}` is not a lineage store (it has no `.store-id`). Give the store folder "
            "itself (a Dagster project keeps it where DSLogResource(store_dir=...) points, by "
            f"default `.dslog` under the IO manager's base directory), or create one with "
            f"`dslog init {path}`."
        )
        raise DSLogError(msg)
    return LineageStore(root)


def _emit(rows: Rows, columns: Sequence[str], fmt: str) -> None:
    """Print ``rows`` to stdout as an aligned table, a JSON array of objects, or CSV."""
    if fmt == "json":
        json.dump(rows, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return
    if fmt == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return
    cells = [[str(c) for c in columns]] + [
        ["" if r[c] is None else str(r[c]) for c in columns] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _init(args: argparse.Namespace) -> int:
    from dslog_dagster.core.store import LineageStore
    from dslog_dagster.core.store.object_backends import is_url

    if is_url(args.store):
        print(f"lineage store at {LineageStore(args.store).remote}")
        return 0
    root = Path(args.store)
    if root.exists() and not root.is_dir():
        msg = f"`{root}` exists and is not a directory; choose another path for the store."
        raise DSLogError(msg)
    existed = root.is_dir() and _is_store(root)
    store = LineageStore(root)
    state = "already a lineage store" if existed else "created an empty lineage store"
    print(f"{state} at {store.root}")
    return 0


#: The columns ``inspect --format json|csv`` gives each lineage table.
TABLE_COLUMNS = ("output", "input", "pairs", "rows", "encoding", "bytes")


def _table_row(t: "TableRecord") -> dict[str, Any]:
    values = (t.output, t.input, t.n_pairs, t.rows, t.encoding, t.stored_bytes)
    return dict(zip(TABLE_COLUMNS, values, strict=True))


def _inspect(args: argparse.Namespace) -> int:
    store = _store(args.store)
    arrays = store.arrays()
    ops = store.operations()
    if args.format == "json":
        doc = {
            "store": str(store.root),
            "arrays": [a.to_json() for a in arrays],
            "operations": [
                {
                    "op_id": op.op_id,
                    "op_name": op.op_name,
                    "inputs": [a.name for a in op.inputs],
                    "outputs": [a.name for a in op.outputs],
                    "capture_method": op.capture_method,
                    "kinds": list(op.kinds),
                    "effects": None if op.effects is None else op.effects.to_json(),
                    "created_at": op.created_at.isoformat(),
                    "tables": [_table_row(t) for t in op.tables],
                }
                for op in ops
            ],
        }
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if args.format == "csv":
        rows = [
            {"op_id": op.op_id, "op_name": op.op_name, **_table_row(t)}
            for op in ops
            for t in op.tables
        ]
        _emit(rows, ["op_id", "op_name", *TABLE_COLUMNS], "csv")
        return 0
    print(f"store {store.root}: {len(arrays)} array(s)")
    for a in arrays:
        print(f"  {a.name:<24} shape={a.shape!s:<16} dtype={a.dtype:<8} version={a.version}")
    print(f"{len(ops)} operation(s)")
    for op in ops:
        ins = ", ".join(a.name for a in op.inputs)
        outs = ", ".join(a.name for a in op.outputs)
        print(f"  {op.op_id}  {op.op_name}({ins}) -> {outs}  [{op.capture_method}]")
        print(f"      kinds: {'unknown' if op.effects is None else op.effects.summary()}")
        for t in op.tables:
            ratio = f"{t.n_pairs / t.rows:,.0f} pairs/row" if t.rows else "empty"
            print(
                f"      {t.output} <- {t.input}: {t.n_pairs:,} pairs, {t.rows:,} rows "
                f"({t.encoding}, {ratio}), {t.stored_bytes:,} B"
            )
    return 0


def _sql(args: argparse.Namespace) -> int:
    table = _store(args.store).sql(args.query)
    _emit(table.to_pylist(), table.column_names, args.format)
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    store = _store(args.store)
    skipped = store.rebuild_catalog()
    print(
        f"catalog rebuilt: {len(store.operations())} operation(s), {len(store.arrays())} array(s)"
    )
    for rel, why in sorted(skipped.items()):
        print(f"skipped damaged {rel}: {why}", file=sys.stderr)
    return 0


def _fsck(args: argparse.Namespace) -> int:
    store = _store(args.store)
    report = store.verify(quarantine_damaged=args.quarantine)
    for line in report.lines():
        print(line)
    if report.damaged and args.quarantine:
        after = store.verify()
        print(f"after quarantine: {'clean' if after.clean else 'still damaged'}")
        return 0 if after.clean else 3
    return 0 if report.clean else 3


def _query(args: argparse.Namespace) -> int:
    from dslog_dagster.core.api import DSLog
    from dslog_dagster.core.query.cellspec import cells_from_spec
    from dslog_dagster.naming import array_name

    if args.chars is not None:
        return _character_query(args)
    log = DSLog(_store(args.store))
    names = list(args.path)
    if len(names) < 2:
        msg = f"A query path names at least two arrays (first and last); got {names}."
        raise DSLogError(msg)
    if args.partition:
        if len(args.partition) not in (1, len(names)):
            msg = (
                f"Give one --partition for every array ({len(names)}) or one for all; "
                f"got {len(args.partition)}."
            )
            raise DSLogError(msg)
        parts = args.partition * len(names) if len(args.partition) == 1 else args.partition
        names = [array_name(n, p or None) for n, p in zip(names, parts, strict=True)]
    source = log.store.get_array(names[0])
    boxes = args.cells if args.cells else [":"]
    cells = cells_from_spec(source.shape, boxes, columns=source.column_names)
    if args.between and len(names) != 2:
        msg = f"--between takes exactly two arrays (source, target), got {len(names)}."
        raise DSLogError(msg)
    direction = None if args.direction == "auto" else args.direction
    if args.engine == "spark":
        from dslog_dagster.spark.query import spark_engine

        engine = spark_engine(log)
        try:
            if args.between:
                result = engine.lineage_between(names[0], names[1], cells, direction=direction)
            else:
                print(log.plan(names), file=sys.stderr)
                result = engine.prov_query(names, cells)
        finally:
            engine.close()
        print("engine: spark", file=sys.stderr)
    elif args.between:
        result = log.lineage_between(names[0], names[1], cells, direction=direction)
        print(f"union over every path {names[0]} -> {names[1]}", file=sys.stderr)
    else:
        plan = log.plan(names)
        print(plan, file=sys.stderr)
        result = plan.run(cells)
    if args.count:
        count = result.count()
        if args.format == "json":
            print(json.dumps({"cells": count}))
        elif args.format == "csv":
            print(f"cells\n{count}")
        else:
            print(count)
        return 0
    table = result.to_arrow()
    if args.output:
        _write_parquet(table, Path(args.output))
        print(f"wrote {result.n_boxes} box(es) to {args.output}", file=sys.stderr)
    else:
        rows, columns = table.to_pylist(), list(table.column_names)
        target = log.store.get_array(names[-1]).column_names
        if target is not None and result.rank == 2:  # a frame: name the columns of each box
            for r in rows:
                r["columns"] = ", ".join(target[r["start_1"] : r["stop_1"]])
            columns.append("columns")
        _emit(rows, columns, args.format)
    print(f"{result.count()} cell(s) in {result.n_boxes} box(es)", file=sys.stderr)
    return 0


def _character_query(args: argparse.Namespace) -> int:
    """``dslog query STORE ARRAY --cells ROW,COLUMN --chars START:STOP``: which characters
    of which cells, walked to the sources (or, ``--direction forward``, to the sinks)."""
    from dslog_dagster.core.character_trace import trace_character_range
    from dslog_dagster.core.query.cellspec import cells_from_spec
    from dslog_dagster.naming import array_name

    if len(args.path) != 1 or args.between or args.engine != "native" or args.output:
        msg = (
            "--chars takes one array (the walk goes to the sources, or with --direction "
            "forward to the sinks), without --between, --engine spark or --output."
        )
        raise DSLogError(msg)
    store = _store(args.store)
    part = args.partition[0] if args.partition else None
    array = store.get_array(array_name(args.path[0], part or None))
    cells = cells_from_spec(array.shape, args.cells or [":"], columns=array.column_names)
    idx = cells.to_indices()
    if len(idx) != 1 or array.column_names is None:
        msg = (
            f"--chars needs exactly one cell of a frame (`--cells ROW,COLUMN`); "
            f"`{array.name}` got {len(idx)} cell(s)"
            + ("" if array.column_names is not None else " and has no column names")
            + "."
        )
        raise DSLogError(msg)
    lo, _, hi = str(args.chars).partition(":")
    try:
        start, stop = int(lo or 0), (int(hi) if hi else None)
    except ValueError as e:
        msg = f"--chars is START:STOP in characters (e.g. 3:7, or : for all), not {args.chars!r}."
        raise DSLogError(msg) from e
    row, col = (int(v) for v in idx[0])
    direction: Literal["forward", "backward"] = (
        "forward" if args.direction == "forward" else "backward"
    )
    got = trace_character_range(
        store, array, row, array.column_names[col], start, stop, direction=direction
    )
    for f in got.fallbacks:
        print(
            f"whole cells: `{f.op_name}` has no character lineage for `{f.array}.{f.column}` "
            f"({f.reason})",
            file=sys.stderr,
        )
    if args.count:
        _emit([{"ranges": len(got.ranges)}], ["ranges"], args.format)
        return 0
    rows = [
        {
            "array": r.input,
            "column": r.column,
            "row": r.row,
            "start": r.start,
            "stop": r.stop,
            "whole": r.whole,
        }
        for r in got.ranges
    ]
    _emit(rows, ["array", "column", "row", "start", "stop", "whole"], args.format)
    exact = "exact" if got.exact else "with whole-cell fallbacks"
    print(f"{len(rows)} character range(s) over {got.hops} hop(s), {exact}", file=sys.stderr)
    return 0


def _write_parquet(table: Any, target: Path) -> None:
    import pyarrow.parquet as pq

    if not target.parent.is_dir():
        msg = f"Cannot write `{target}`: the folder `{target.parent}` does not exist; create it."
        raise DSLogError(msg)
    try:
        pq.write_table(table, target)
    except OSError as e:
        msg = f"Cannot write `{target}`: {e}"
        raise LineageStorageError(msg) from e


def _compact(args: argparse.Namespace) -> int:
    res = _store(args.store).compact()
    if res.skipped:
        print("another compaction of this store is running; nothing done")
        return 1
    print(
        f"packed {res.operations} operation(s) from {res.files_removed} file(s) "
        f"({res.bytes_before:,} B) into {len(res.packs)} pack(s) ({res.bytes_after:,} B)"
    )
    return 0


def _prov(args: argparse.Namespace) -> int:
    from dslog_dagster.core.api import DSLog
    from dslog_dagster.core.query.cellspec import cells_from_spec
    from dslog_dagster.export import asset_document, query_document, to_text

    log = DSLog(_store(args.store))
    names = list(args.path)
    if len(names) == 1:
        if args.cells:
            msg = "--cells selects cells of a query path: name at least two arrays."
            raise DSLogError(msg)
        doc = asset_document(
            log,
            names[0],
            version=args.version,
            depth=args.depth,
            cells=not args.no_cells,
            max_rows=args.max_rows,
        )
    else:
        if args.version is not None or args.depth is not None or args.no_cells:
            msg = "--version, --depth and --no-cells apply to one array's document, not a path."
            raise DSLogError(msg)
        source = log.store.get_array(names[0])
        cells = cells_from_spec(source.shape, args.cells or [":"], columns=source.column_names)
        doc = query_document(log, names, cells)
    text = to_text(doc, args.prov_format)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(
            f"wrote {len(text):,} characters of PROV-{args.prov_format.upper()} to {args.output}",
            file=sys.stderr,
        )
    else:
        print(text)
    return 0


def _diff(args: argparse.Namespace) -> int:
    from dslog_dagster.cli_values import values_loader
    from dslog_dagster.core.change import explain_change

    store = _store(args.store)
    load = values_loader(args.values)
    expl = explain_change(store, args.array, args.version_a, args.version_b, load)
    rows = expl.rows()
    _emit(rows, list(rows[0]), args.format)
    print(expl.summary(), file=sys.stderr)
    return 0


def _trace(args: argparse.Namespace) -> int:
    import importlib
    import importlib.util

    from dslog_dagster.cli_values import values_loader
    from dslog_dagster.core.api import DSLog
    from dslog_dagster.core.on_demand import trace
    from dslog_dagster.core.query.cellspec import cells_from_spec
    from dslog_dagster.core.reuse import ViewRegistry

    for module in args.import_module or []:
        try:
            importlib.import_module(module)  # registers the module's tracked steps
        except ImportError as e:
            msg = f"Cannot import `{module}` (--import): {e}"
            raise DSLogError(msg) from e
    if importlib.util.find_spec("pyspark") is not None:
        import dslog_dagster.spark.on_demand  # noqa: F401  # re-runs on-demand Spark steps
    log = DSLog(_store(args.store))
    names = list(args.path)
    source = log.store.get_array(names[0])
    cells = cells_from_spec(source.shape, args.cells or [":"], columns=source.column_names)
    views = ViewRegistry(log.store)  # a confirmed view may know a step's lineage
    result, done = trace(log, names, cells, values_loader(args.values, frames=True), views=views)
    for r in done:
        print(
            f"reconstructed {r.deferred.op_name} ({r.deferred.op_id[:12]}…, {r.how}) "
            f"in {r.seconds:.2f} s",
            file=sys.stderr,
        )
    table = result.to_arrow()
    rows = table.to_pylist()
    _emit(rows, table.column_names, args.format)
    print(f"{result.count():,} cell(s)", file=sys.stderr)
    return 0


def _discover(args: argparse.Namespace) -> int:
    from dslog_dagster.cli_discover import discover_command
    from dslog_dagster.cli_values import values_loader

    def emit(rows: Rows) -> None:
        _emit(rows, list(rows[0]), args.format)

    return discover_command(args, _store(args.store), values_loader(args.values, frames=True), emit)


def _provenance(args: argparse.Namespace) -> int:
    from dslog_dagster.core import provenance_queries as pq
    from dslog_dagster.core.query.cellspec import cells_from_spec

    store = _store(args.store)
    if args.question == "invalidated":
        if args.cells or args.row is not None or args.column is not None or args.version:
            msg = "`invalidated` takes an operation id only (no cells, rows, columns or version)."
            raise DSLogError(msg)
        ans = pq.invalidated(store, args.target)
    else:
        rec = store.get_array(args.target, args.version)
        cells = (
            cells_from_spec(rec.shape, args.cells, columns=rec.column_names) if args.cells else None
        )
        sel = pq.select(rec.shape, cells=cells, row=args.row, column=args.column)
        if args.kind is not None and args.question != "how":
            msg = "`--kind` filters the operations of `how` only."
            raise DSLogError(msg)
        ask = {"why": pq.why, "how": pq.how, "history": pq.history, "spread": pq.spread}
        kw = {"kind": args.kind} if args.kind is not None else {}
        ans = ask[args.question](store, rec, sel, **kw)
    rows = ans.rows()
    _emit(rows, list(rows[0]) if rows else ["array"], args.format)
    print(ans.summary(), file=sys.stderr)
    return 0


def _subcommand(
    sub: Any,
    name: str,
    summary: str,
    examples: str,
    func: Callable[[argparse.Namespace], int],
    *,
    formats: bool = False,
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("store", help="the lineage store folder")
    if formats:
        p.add_argument(
            "--format",
            choices=FORMATS,
            default="table",
            help="how results go to stdout: an aligned table (default), JSON or CSV",
        )
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The ``dslog`` argument parser (every subcommand, its help and examples)."""
    from dslog_dagster import cli_discover, cli_export

    exit_codes = "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items())
    parser = argparse.ArgumentParser(
        prog="dslog",
        description=(__doc__ or "").split("\n\n")[0],
        epilog="exit codes:\n" + exit_codes + "\n\nRun `dslog COMMAND --help` for examples.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dslog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _subcommand(sub, "init", "create an empty lineage store", "  dslog init lineage-store\n", _init)
    _subcommand(
        sub,
        "inspect",
        "list arrays, operations and lineage tables",
        "  dslog inspect data/.dslog\n  dslog inspect data/.dslog --format json | jq .operations\n",
        _inspect,
        formats=True,
    )
    p = _subcommand(
        sub,
        "sql",
        "read-only SQL over the catalog",
        '  dslog sql data/.dslog "SELECT op_name, rows, encoding FROM lineage_tables"\n'
        '  dslog sql data/.dslog "SELECT name, shape FROM arrays" --format csv > arrays.csv\n',
        _sql,
        formats=True,
    )
    p.add_argument("query", help="one SELECT statement over the catalog tables")
    _subcommand(
        sub,
        "rebuild-catalog",
        "rebuild the DuckDB catalog from the lineage files",
        "  dslog rebuild-catalog data/.dslog\n",
        _rebuild,
    )
    p = _subcommand(
        sub,
        "query",
        "lineage of cells along a path of arrays",
        "  dslog query data/.dslog images/hot images/smoothed images/raw --cells 0:2,0:2\n"
        "  dslog query data/.dslog images/hot images/raw --between --cells 5,7 --count\n"
        "  dslog query data/.dslog totals counts --partition '' --partition 2026-11-21 \\\n"
        "      --cells 1 --format json\n"
        "  dslog query data/.dslog words --cells 4,word --chars 0:3\n",
        _query,
        formats=True,
    )
    _query_options(p)
    _lineage_commands(sub)
    cli_export.add_export_command(sub, _store)
    p = _subcommand(
        sub, "discover", cli_discover.SUMMARY, cli_discover.EXAMPLES, _discover, formats=True
    )
    cli_discover.add_discover_arguments(p)
    _subcommand(
        sub,
        "compact",
        "pack small operations into shared pack files",
        "  dslog compact data/.dslog\n",
        _compact,
    )
    p = _subcommand(
        sub,
        "fsck",
        "check every file of the store against its checksum (exit 3 when damaged)",
        "  dslog fsck data/.dslog\n  dslog fsck data/.dslog --quarantine\n",
        _fsck,
    )
    p.add_argument(
        "--quarantine",
        action="store_true",
        help="move damaged files to STORE/quarantine/ so the rest of the store works; "
        "rebuild the catalog",
    )
    return parser


def _lineage_commands(sub: Any) -> None:
    """The subcommands that answer provenance questions beyond a path query: PROV export,
    the DPDS questions, on-demand traces and change explanations."""
    p = _subcommand(
        sub,
        "prov",
        "W3C PROV of an array version (one name) or of a query's answer (a path)",
        "  dslog prov data/.dslog images/hot > hot.prov.json\n"
        "  dslog prov data/.dslog images/hot --depth 1 --prov-format provn\n"
        "  dslog prov data/.dslog images/hot images/smoothed images/raw --cells 0:2,0:2\n",
        _prov,
    )
    p.add_argument("path", nargs="+", help="one array (its derivation) or a query path")
    p.add_argument("--version", help="the array's version (default: the latest)")
    p.add_argument("--depth", type=int, help="upstream operations to include (default: all)")
    p.add_argument(
        "--no-cells", action="store_true", help="arrays and operations only, no cell boxes"
    )
    p.add_argument(
        "--max-rows",
        type=int,
        default=100_000,
        help="refuse a document spelling out more ProvRC rows than this (default 100000)",
    )
    p.add_argument("--cells", action="append", help="with a path: a box of the first array")
    p.add_argument("--prov-format", choices=["json", "provn"], default="json")
    p.add_argument("--output", help="write the document to this file instead of stdout")
    p = _subcommand(
        sub,
        "trace",
        "a path query that first reconstructs the lineage of on-demand steps on the path",
        "  dslog trace data/.dslog hot smoothed raw --cells 0:2,0:2 --values data \\\n"
        "      --import my_project.definitions\n",
        _trace,
        formats=True,
    )
    p.add_argument("path", nargs="+", help="array names, first to last (at least two)")
    p.add_argument("--cells", action="append", help="a box of the first array (default: all)")
    p.add_argument(
        "--values", required=True, help="where the DSLogIOManager keeps values (its base_dir)"
    )
    p.add_argument(
        "--import",
        dest="import_module",
        action="append",
        help="a module defining the on-demand steps (imported so they can be re-run)",
    )
    p = _subcommand(
        sub,
        "diff",
        "explain how two versions of an asset differ: changed cells traced upstream",
        "  dslog diff data/.dslog images/hot RUN_A RUN_B --values data\n",
        _diff,
        formats=True,
    )
    p.add_argument("array", help="the array (an asset key path, `name[partition]`)")
    p.add_argument("version_a", help="the earlier version (the run id that materialized it)")
    p.add_argument("version_b", help="the later version")
    p.add_argument(
        "--values", required=True, help="where the DSLogIOManager keeps values (its base_dir)"
    )
    p = _subcommand(
        sub,
        "provenance",
        "DPDS provenance queries: why, how, history, spread of cells; what an operation dropped",
        "  dslog provenance data/.dslog why frames/joined --row 3 --column 2\n"
        "  dslog provenance data/.dslog how frames/joined --row 3\n"
        "  dslog provenance data/.dslog how frames/joined --row 3 --kind imputation\n"
        "  dslog provenance data/.dslog spread frames/raw --column 1 --format json\n"
        "  dslog provenance data/.dslog invalidated OP_ID\n",
        _provenance,
        formats=True,
    )
    p.add_argument("question", choices=["why", "how", "history", "spread", "invalidated"])
    p.add_argument("target", help="the array (an operation id for `invalidated`)")
    p.add_argument("--version", help="the array's version (default: the latest)")
    p.add_argument("--row", type=int, help="a record (with --column: an item)")
    p.add_argument("--column", type=int, help="a feature (with --row: an item)")
    p.add_argument("--cells", action="append", help="any box of the array, e.g. 0:10,3")
    p.add_argument("--kind", help="`how`: only operations of this DPDS kind, e.g. imputation")


def _query_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        nargs="+",
        help="array names, first to last (at least two); an asset is its key with `/`, "
        "e.g. images/smoothed",
    )
    p.add_argument(
        "--cells",
        action="append",
        help="a box of the first array as NumPy indices, e.g. 0:10,3 (repeatable; default: all)",
    )
    p.add_argument(
        "--between",
        action="store_true",
        help="two arrays: union over every path between them (what the query assets do)",
    )
    p.add_argument(
        "--direction",
        choices=["auto", "forward", "backward"],
        default="auto",
        help="with --between: insist on a direction (default: whichever links them)",
    )
    p.add_argument(
        "--partition",
        action="append",
        help="partition key of a partitioned asset: once for all arrays or once per array "
        "in order ('' for an unpartitioned one)",
    )
    p.add_argument(
        "--engine",
        choices=["native", "spark"],
        default="native",
        help="native: in-situ C++ here (default); spark: range joins in Spark SQL on a local "
        "session, for stores too big for one machine",
    )
    p.add_argument("--output", help="write the boxes to this Parquet file instead of stdout")
    p.add_argument("--count", action="store_true", help="print only the number of cells")
    p.add_argument(
        "--chars",
        metavar="START:STOP",
        help="character lineage: characters START:STOP (':' for all) of the one string cell "
        "--cells ROW,COLUMN of one array, walked to the sources (--direction forward: the "
        "sinks); a hop without character lineage answers whole cells and says so",
    )


@contextmanager
def _quiet_on_closed_pipe() -> Iterator[None]:
    """Turn a reader that stopped early (``dslog ... | head -1``) into a quiet exit 141."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at devnull so that flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dslog`` with ``argv`` (default: the process arguments); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        # a name stored before lone surrogates were refused must print, not crash the listing
        reconfigure(errors="backslashreplace")
    if args.command is None:
        parser.print_help()
        return 0
    try:
        with _quiet_on_closed_pipe():
            return int(args.func(args))
    except BrokenPipeError:
        return 141
    except DSLogError as e:
        # one line (DuckDB's messages span several): scripts read the last line of stderr
        print("dslog: " + " ".join(str(e).split()), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
