"""``dslog export openlineage``: a stored asset version's OpenLineage run events.

Its own module because ``cli.py`` holds the query commands and is near its size limit; the
events themselves are built by :mod:`dslog_dagster.export.openlineage_events`, the same code
that sends them at materialization.
"""

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_export_command"]

EXAMPLES = (
    "  dslog export openlineage data/.dslog images/hot > hot.openlineage.jsonl\n"
    "  dslog export openlineage data/.dslog movies/joined --version RUN_ID --namespace prod \\\n"
    "      --output joined.jsonl\n"
)


def add_export_command(sub: Any, store: Callable[[str], Any]) -> None:
    """Add ``export openlineage`` to the ``dslog`` subcommands; ``store`` opens a store."""
    p = sub.add_parser(
        "export",
        help="lineage in another system's format (OpenLineage run events)",
        description="Lineage in another system's format.",
    )
    fmt = p.add_subparsers(dest="export_format", required=True, metavar="FORMAT")
    o = fmt.add_parser(
        "openlineage",
        help="OpenLineage run events (START, COMPLETE) of an asset version, one JSON per line",
        description=(
            "The OpenLineage run events of one stored array version's materialization, one "
            "JSON object per line, with the output's columnLineage facet."
        ),
        epilog="examples:\n" + EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    o.add_argument("store", help="the lineage store folder")
    o.add_argument("array", help="the array (asset) whose materialization the events describe")
    o.add_argument("--version", help="the array's version (default: the latest)")
    o.add_argument("--namespace", default="dslog", help="namespace of jobs and datasets")
    o.add_argument("--output", help="write the events to this file instead of stdout")

    def run(args: argparse.Namespace) -> int:
        from dslog_dagster.export.openlineage_events import event_json, stored_events

        events = stored_events(
            store(args.store), args.array, version=args.version, namespace=args.namespace
        )
        text = "".join(json.dumps(event_json(e), sort_keys=True) + "\n" for e in events)
        if args.output:
            Path(args.output).write_text(text, encoding="utf-8")
            print(f"wrote {len(events)} OpenLineage events to {args.output}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0

    o.set_defaults(func=run)
