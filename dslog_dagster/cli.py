"""`dslog` command line: look into a lineage store without writing Python.

dslog inspect STORE            arrays, operations and lineage tables with their sizes
dslog sql STORE "SELECT ..."   read-only SQL over the DuckDB catalog
dslog rebuild-catalog STORE    rebuild the catalog from the lineage files
dslog query STORE A B [C ...] --cells "0:10,3"
                               cells of the last array linked to cells of the first
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


def _parse_box(text: str) -> tuple[int | slice, ...]:
    """``"0:10,3"`` -> ``(slice(0, 10), 3)`` (NumPy basic indexing, unit steps)."""
    parts: list[int | slice] = []
    for item in text.split(","):
        item = item.strip()
        try:
            if ":" in item:
                a, _, b = item.partition(":")
                parts.append(slice(int(a) if a.strip() else None, int(b) if b.strip() else None))
            else:
                parts.append(int(item))
        except ValueError as e:
            msg = f"Cannot read `{item}` in --cells `{text}`; use ints and a:b slices, e.g. 0:10,3."
            raise DSLogError(msg) from e
    return tuple(parts)


def _query(args: argparse.Namespace) -> int:
    from dslog_dagster.core.api import DSLog

    log = DSLog(_store(args.store))
    plan = log.plan(args.path)
    print(plan, file=sys.stderr)
    cells = [_parse_box(c) for c in args.cells] if args.cells else [(slice(None),)]
    result = plan.run(cells)
    if args.count:
        print(result.count())
        return 0
    table = result.to_arrow()
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
    p.add_argument("path", nargs="+", help="array names, first to last (at least two)")
    p.add_argument(
        "--cells",
        action="append",
        help="a box of the first array as NumPy indices, e.g. 0:10,3 (repeatable; default: all)",
    )
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
