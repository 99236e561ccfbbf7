"""`dslog` command line: look into a lineage store without writing Python.

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
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dslog_dagster.errors import DSLogError


def _store(path: str):  # type: ignore[no-untyped-def]
    from dslog_dagster.core.store import LineageStore

    root = Path(path)
    if not root.is_dir():
        msg = f"No lineage store at `{root}` (not a directory)."
        raise DSLogError(msg)
    return LineageStore(root)


def _inspect(args: argparse.Namespace) -> int:
    store = _store(args.store)
    arrays = store.arrays()
    print(f"store {args.store}: {len(arrays)} array(s)")
    for a in arrays:
        print(f"  {a.name:<24} shape={a.shape!s:<16} dtype={a.dtype:<8} version={a.version}")
    ops = store.operations()
    print(f"{len(ops)} operation(s)")
    for op in ops:
        ins = ", ".join(a.name for a in op.inputs)
        outs = ", ".join(a.name for a in op.outputs)
        print(f"  {op.op_id}  {op.op_name}({ins}) -> {outs}  [{op.capture_method}]")
        for t in op.tables:
            ratio = f"{t.n_pairs / t.rows:.0f} pairs/row" if t.rows else "empty"
            print(
                f"      {t.output} <- {t.input}: {t.n_pairs} pairs, {t.rows} rows "
                f"({t.encoding}, {ratio}), {t.stored_bytes} B"
            )
    return 0


def _sql(args: argparse.Namespace) -> int:
    table = _store(args.store).sql(args.query)
    names = table.column_names
    print("\t".join(names))
    for row in table.to_pylist():
        print("\t".join(str(row[n]) for n in names))
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    store = _store(args.store)
    store.rebuild_catalog()
    print(
        f"catalog rebuilt: {len(store.operations())} operation(s), {len(store.arrays())} array(s)"
    )
    return 0


def _query(args: argparse.Namespace) -> int:
    from dslog_dagster.core.api import DSLog
    from dslog_dagster.core.query.cellspec import cells_from_spec
    from dslog_dagster.naming import array_name

    log = DSLog(_store(args.store))
    names = list(args.path)
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
    cells = cells_from_spec(source.shape, boxes)
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
        print(result.count())
        return 0
    table = result.to_arrow()
    if args.output:
        import pyarrow.parquet as pq

        pq.write_table(table, args.output)
        print(f"wrote {result.n_boxes} box(es) to {args.output}", file=sys.stderr)
    else:
        print("\t".join(table.column_names))
        for row in table.to_pylist():
            print("\t".join(str(v) for v in row.values()))
    print(f"{result.count()} cell(s) in {result.n_boxes} box(es)", file=sys.stderr)
    return 0


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dslog", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="list arrays, operations and lineage tables")
    p.add_argument("store")
    p.set_defaults(func=_inspect)
    p = sub.add_parser("sql", help="read-only SQL over the catalog")
    p.add_argument("store")
    p.add_argument("query")
    p.set_defaults(func=_sql)
    p = sub.add_parser("rebuild-catalog", help="rebuild the DuckDB catalog from the files")
    p.add_argument("store")
    p.set_defaults(func=_rebuild)
    p = sub.add_parser("query", help="lineage of cells along a path of arrays")
    p.add_argument("store")
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
    p.set_defaults(func=_query)
    p = sub.add_parser("compact", help="pack small operations into shared pack files")
    p.add_argument("store")
    p.set_defaults(func=_compact)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except DSLogError as e:
        print(f"dslog: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
