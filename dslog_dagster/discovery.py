"""Missing-parameter discovery for a tracked asset: search its Dagster ``Config`` fields.

:mod:`dslog_dagster.core.discovery` finds the parameter values that reproduce selected cells of
a stored output, given a function ``run(params, inputs)``. This module builds that function
from an asset's definition: the step's own (undecorated) function, its tracked inputs by the
store's array names, a ``Config`` instance per candidate (the searched fields set, every other
field as the run recorded it or else its default), and a built context for a step that takes
one. A search space naming anything but a field of the step's ``Config`` class is refused, as
is a candidate value the field does not accept.
"""

import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg
import numpy as np

from dslog_dagster.core.discovery import Discovery, discover_in_store, grid, stored_values
from dslog_dagster.core.query import CellSet
from dslog_dagster.core.store import ArrayRecord, LineageStore, OperationRecord
from dslog_dagster.core.trace import producer_of
from dslog_dagster.errors import ConfigurationError
from dslog_dagster.naming import array_name

__all__ = ["config_class", "config_fields", "discover_parameters"]


def _step(assets_def: dg.AssetsDefinition) -> tuple[Callable[..., Any], str, type[dg.Config]]:
    """The step's own function, its ``Config`` parameter's name and class."""
    fn = inspect.unwrap(assets_def.op.compute_fn.decorated_fn)  # type: ignore[union-attr]
    name = assets_def.op.name
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as e:
        msg = f"Cannot read the annotations of step `{name}`: {e}"
        raise ConfigurationError(msg) from e
    configs = [
        (p, t)
        for p in inspect.signature(fn).parameters
        if isinstance(t := hints.get(p), type) and issubclass(t, dg.Config)
    ]
    if len(configs) != 1:
        msg = (
            f"Step `{name}` takes {len(configs)} Config parameters; parameter discovery searches "
            "the fields of exactly one `dagster.Config` class."
        )
        raise ConfigurationError(msg)
    return fn, configs[0][0], configs[0][1]


def config_class(assets_def: dg.AssetsDefinition) -> type[dg.Config]:
    """The ``Config`` class of the asset's step (the fields discovery may search)."""
    return _step(assets_def)[2]


def config_fields(assets_def: dg.AssetsDefinition) -> dict[str, Any]:
    """The fields of the asset's ``Config`` class, with their defaults (``...``: required)."""
    _, _, cls = _step(assets_def)
    return {k: (f.default if not f.is_required() else ...) for k, f in cls.model_fields.items()}


def _is_spark(op: OperationRecord | None) -> bool:
    """Did a Spark step make the output (captured, or on demand with the Spark engine)?"""
    if op is None:
        return False
    info = op.args.get("on_demand")
    engine = info.get("engine") if isinstance(info, dict) else None
    return engine == "spark" or op.capture_method.startswith("spark")


def _discover_spark(
    run: Callable[[Mapping[str, Any], Mapping[str, Any]], Any],
    op: OperationRecord | None,
    array: ArrayRecord,
    cells: CellSet,
    space: Mapping[str, Sequence[Any]],
    load: Callable[[ArrayRecord], Any],
    output: int,
    exhaustive: bool,
) -> Discovery:
    """A Spark step's discovery: the selection pushed down as semijoins, not read from the
    stored lineage (:mod:`dslog_dagster.spark.discovery`)."""
    from dslog_dagster.spark.discovery import discover_frames

    values = stored_values(load, (*(op.inputs if op is not None else ()), array))
    for rec in (*(op.inputs if op is not None else ()), array):
        value = values[rec.name]
        if not hasattr(value, "sparkSession"):
            msg = (
                f"`{rec.name}` loaded as a `{type(value).__name__}`, not a Spark DataFrame; "
                "discovery on a Spark step loads values with "
                "DSLogIOManager.value_loader(frames=True)."
            )
            raise ConfigurationError(msg)
    stored = values.pop(array.name)
    rows = np.unique(cells.to_flat() // max(1, int(np.prod(array.shape[1:]))))
    return discover_frames(run, values, stored, rows, space, output=output, exhaustive=exhaustive)


def discover_parameters(
    assets_def: dg.AssetsDefinition,
    store: LineageStore,
    load: Callable[[ArrayRecord], Any],
    space: Mapping[str, Sequence[Any]],
    *,
    cells: CellSet | None = None,
    asset_key: dg.AssetKey | str | None = None,
    version: str | None = None,
    partition: str | None = None,
    exhaustive: bool = False,
) -> Discovery:
    """The values of the asset's ``Config`` fields in ``space`` that reproduce ``cells`` of
    a stored version of the asset (:func:`dslog_dagster.core.discovery.discover`).

    Args:
        assets_def: the tracked asset (``@tracked_asset`` / ``@tracked_multi_asset``).
        store: the lineage store the asset's runs wrote to.
        load: the stored value of an array version (``DSLogIOManager.value_loader()``; for a
            Spark step ``value_loader(frames=True)``).
        space: candidate values per ``Config`` field (a list, or a ``range``).
        cells: the output cells to reproduce (default: every cell).
        asset_key: which output of a multi-asset (default: its only one).
        version: the output version (the run id that materialized it; default: the latest).
        partition: the partition key of a partitioned asset.
        exhaustive: run every candidate on the whole input.

    A Spark step (a filter threshold, say) is searched by
    :func:`dslog_dagster.spark.discovery.discover_frames`: its part is the inputs semijoined
    with the selected output rows (the selective re-run's push-down), and ``cells`` selects
    output rows.

    Raises:
        ConfigurationError: ``space`` names something that is not a field of the step's
            ``Config`` class, a candidate the field refuses, or a required field outside it.
        DiscoveryError: no candidate reproduces the cells.
        LineageNotFoundError: the version has no lineage, or a value is not stored.

    Example (the example project's ``hotspots`` step; ``tests/dagster/test_discovery.py``
    runs it)::

        found = discover_parameters(
            hotspots, dslog.store(), io.value_loader(), {"tile": [8, 16, 32]}
        )
        found.matches  # ({'tile': 8},) when the step ran with tile=8
    """
    fn, config_param, cls = _step(assets_def)
    fields = cls.model_fields
    unknown = [k for k in space if k not in fields]
    if unknown:
        msg = (
            f"{unknown} {'is not a field' if len(unknown) == 1 else 'are not fields'} of "
            f"`{cls.__name__}`, the Config of step `{assets_def.op.name}`; searchable fields: "
            f"{sorted(fields)}."
        )
        raise ConfigurationError(msg)
    keys = list(assets_def.keys)
    if asset_key is None:
        if len(keys) != 1:
            msg = f"Step `{assets_def.op.name}` makes {len(keys)} assets; name one (asset_key=)."
            raise ConfigurationError(msg)
        key = keys[0]
    else:
        key = dg.AssetKey.from_user_string(asset_key) if isinstance(asset_key, str) else asset_key
    out_name = next(n for n, k in assets_def.keys_by_output_name.items() if k == key)
    output = [o.name for o in assets_def.op.output_defs].index(out_name)
    array = store.get_array(array_name(key, partition), version)
    op = producer_of(store, array)
    recorded = dict((op.args.get("config") or {}) if op is not None else {})
    base = {k: v for k, v in recorded.items() if k in fields and k not in space}
    missing = [k for k, f in fields.items() if f.is_required() and k not in space and k not in base]
    if missing:
        msg = (
            f"Field(s) {missing} of `{cls.__name__}` have no default and no recorded value; add "
            "them to the search space."
        )
        raise ConfigurationError(msg)
    configs: dict[tuple[Any, ...], dg.Config] = {}
    for p in grid(space):
        try:
            configs[tuple(p.values())] = cls(**{**base, **p})
        except Exception as e:  # pydantic's ValidationError: a value the field refuses
            msg = f"Candidate {p} is not a valid `{cls.__name__}`: {e}"
            raise ConfigurationError(msg) from e
    params = list(inspect.signature(fn).parameters)
    # the store names each input array after its asset (and the partition it read)
    by_key = {"/".join(k.path): p for p, k in assets_def.keys_by_input_name.items()}
    by_array = {
        rec.name: by_key[rec.asset_key]
        for rec in (op.inputs if op is not None else ())
        if rec.asset_key in by_key
    }
    context = dg.build_asset_context() if "context" in params else None

    def run(candidate: Mapping[str, Any], inputs: Mapping[str, Any]) -> Any:
        kwargs: dict[str, Any] = {by_array.get(n, n): v for n, v in inputs.items()}
        kwargs[config_param] = configs[tuple(candidate.values())]
        if context is not None:
            kwargs["context"] = context
        return fn(**kwargs)

    cells = cells if cells is not None else CellSet.full(array.shape)
    if _is_spark(op):
        return _discover_spark(run, op, array, cells, space, load, output, exhaustive)
    return discover_in_store(
        store, array, cells, space, run, load, output=output, exhaustive=exhaustive,
        producer=op,
    )  # fmt: skip
