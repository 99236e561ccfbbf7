"""``dslog discover``: missing-parameter discovery from the command line.

Its own module because the command needs more than the store: the code location's module (to
find the asset's step and its ``Config`` class), the values folder, and a search space spelt
as text (``sigmas=1.5,2,2.5`` or ``tile=4:33:4``), converted to each field's type.
"""

import argparse
import importlib
import math
import sys
from collections.abc import Callable
from typing import Any

from dslog_dagster.errors import ConfigurationError, DSLogError

__all__ = ["EXAMPLES", "SUMMARY", "add_discover_arguments", "discover_command", "parse_space"]

SUMMARY = "find the Config values of a step that reproduce cells of a stored output"
EXAMPLES = (
    "  dslog discover data/.dslog thresholded --import hotspots.assets --values data \\\n"
    "      --space sigmas=1.5:3.51:0.25 --cells 20:40,20:40\n"
    "  dslog discover data/.dslog hotspots --import hotspots.assets --values data \\\n"
    "      --space tile=4,8,16,32 --format json\n"
)


def _convert(text: str, kind: Any) -> Any:
    if kind is bool:
        low = text.strip().lower()
        if low not in ("true", "false", "1", "0"):
            msg = f"`{text}` is not a boolean (true/false)."
            raise ConfigurationError(msg)
        return low in ("true", "1")
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError as e:
            msg = f"`{text}` is not {'an integer' if kind is int else 'a number'}."
            raise ConfigurationError(msg) from e
    return text


def parse_space(specs: list[str], fields: dict[str, Any]) -> dict[str, list[Any]]:
    """``name=a,b,c`` (choices) or ``name=start:stop:step`` (stop excluded), one per field,
    each value converted to the field's type (``fields``: name -> annotation).

    Raises:
        ConfigurationError: a malformed spec, a field given twice, or a value of the wrong type.
    """
    space: dict[str, list[Any]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        if not sep or not name or not values.strip():
            msg = f"`--space {spec}`: write `FIELD=a,b,c` or `FIELD=start:stop:step`."
            raise ConfigurationError(msg)
        if name in space:
            msg = f"Field `{name}` is given twice in --space."
            raise ConfigurationError(msg)
        kind = fields.get(name, str)
        parts = values.split(":")
        if len(parts) == 3 and kind in (int, float):
            start, stop, step = (_convert(p, kind) for p in parts)
            if step <= 0 or stop <= start:
                msg = f"`--space {spec}`: a range needs start < stop and a positive step."
                raise ConfigurationError(msg)
            n = math.ceil((stop - start) / step - 1e-9)
            space[name] = [kind(round(start + k * step, 12)) for k in range(n)]
        else:
            space[name] = [_convert(v.strip(), kind) for v in values.split(",")]
    return space


def _assets_def(modules: list[str], key: str) -> Any:
    import dagster as dg

    found = []
    for module in modules:
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            msg = f"Cannot import `{module}` (--import): {e}"
            raise DSLogError(msg) from e
        for value in vars(mod).values():
            if isinstance(value, dg.AssetsDefinition) and any(
                k.to_user_string() == key for k in value.keys
            ):
                found.append(value)
    if not found:
        msg = f"No asset `{key}` among the assets defined in {modules} (--import)."
        raise DSLogError(msg)
    return found[0]


def discover_command(
    args: argparse.Namespace,
    store: Any,
    load: Any,
    emit: Callable[[list[dict[str, Any]]], None],
) -> int:
    """Run ``dslog discover`` (``dslog_dagster.cli`` hands over the store, the value loader
    of ``--values`` and how to print rows)."""
    from dslog_dagster.core.query.cellspec import cells_from_spec
    from dslog_dagster.discovery import config_class, discover_parameters
    from dslog_dagster.naming import array_name

    assets_def = _assets_def(args.import_module, args.asset)
    fields = {k: f.annotation for k, f in config_class(assets_def).model_fields.items()}
    space = parse_space(args.space, fields)
    rec = store.get_array(array_name(args.asset, args.partition), args.version)
    cells = cells_from_spec(rec.shape, args.cells) if args.cells else None
    found = discover_parameters(
        assets_def,
        store,
        load,
        space,
        cells=cells,
        asset_key=args.asset,
        version=rec.version,
        partition=args.partition,
        exhaustive=args.exhaustive,
    )
    emit(found.rows())
    print(found.summary(), file=sys.stderr)
    return 0


def add_discover_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``dslog discover`` (after the store)."""
    p.add_argument("asset", help="the asset (its key with `/`) whose config is unknown")
    p.add_argument(
        "--space",
        action="append",
        required=True,
        help="candidate values of one Config field: FIELD=a,b,c or FIELD=start:stop:step "
        "(repeatable: the grid of all fields)",
    )
    p.add_argument(
        "--import",
        dest="import_module",
        action="append",
        required=True,
        help="a module defining the asset (its step is re-run)",
    )
    p.add_argument(
        "--values", required=True, help="where the DSLogIOManager keeps values (its base_dir)"
    )
    p.add_argument("--cells", action="append", help="a box of the output (default: all)")
    p.add_argument("--version", help="the output version (default: the latest)")
    p.add_argument("--partition", help="the partition key of a partitioned asset")
    p.add_argument(
        "--exhaustive",
        action="store_true",
        help="run every candidate on the whole input (no lineage selection)",
    )
