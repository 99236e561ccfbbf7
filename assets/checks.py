"""Asset checks on the lineage of tracked assets.

:func:`lineage_checks` gives each asset whose lineage is expected (an asset with upstream
assets; source assets have none to check) three checks, run together in one step (a
``multi_asset_check``). They look at the asset's latest materialization, find its array in the
store (``array_name(key, partition)``, version = the run id that materialized it) and the
operations that wrote that version:

``dslog_lineage_readable`` — severity **ERROR**
    The array version is registered, some operation wrote it, and every lineage table of those
    operations for it reads back and decompresses. A failure means queries over this asset
    fail or are impossible: a missing, truncated or foreign file, or lineage written to another
    store than the one the check reads (the message names both).
``dslog_lineage_shape`` — severity **ERROR**
    The registered shape equals the materialized value's shape where the materialization
    records one (``dslog/shape``, or ``dagster/row_count`` for the first axis), and every
    table's relation connects exactly the registered shapes of its output and input. A
    failure means the lineage describes a different array, so answers would be wrong.
``dslog_lineage_coverage`` — severity **WARN** by default
    Every cell of the output has lineage to some input, or is declared constant: by the
    ``constant_cells`` argument, or by ``dslog/constant_cells`` materialization metadata (a
    JSON list of box strings such as ``["0,:"]``). Gaps do not make other answers wrong, only
    incomplete — hence WARN; pass ``coverage_severity=ERROR`` to make them fail hard.

A materialization registered as a source array version (``dslog/obtained = source``: the step
read no tracked input) passes all three: it has no lineage to check; so does one of a step run
with ``policy="on_demand"`` (its lineage is captured, and checked, when a query needs it).
Failing checks say what
was found and what to do in their description, and the details in their metadata (array,
version, bad tables with their errors, uncovered cell count with a picture and the first
boxes, written ``start:stop`` per axis).
"""

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from dslog_dagster.assets._render import boxes_preview, cells_markdown
from dslog_dagster.assets.queries import DEFAULT_RESOURCE_KEY
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.query import CellSet, format_box, prepare
from dslog_dagster.core.query.cellspec import cells_from_spec
from dslog_dagster.core.store import ArrayRecord, OperationRecord
from dslog_dagster.errors import DSLogError, LineageNotFoundError
from dslog_dagster.io_managers import metadata as m
from dslog_dagster.naming import array_name

__all__ = [
    "CHECK_COVERAGE",
    "CHECK_READABLE",
    "CHECK_SHAPE",
    "lineage_checks",
]

CHECK_READABLE = "dslog_lineage_readable"
CHECK_SHAPE = "dslog_lineage_shape"
CHECK_COVERAGE = "dslog_lineage_coverage"

AssetRef = dg.AssetsDefinition | dg.AssetSpec | dg.AssetKey | str | Sequence[str]


@dataclass(frozen=True, slots=True)
class _Located:
    """An asset's latest materialization and its array version in the store."""

    run_id: str
    partition: str | None
    metadata: Mapping[str, Any]
    array: ArrayRecord
    producers: list[OperationRecord]


class _Fail(Exception):
    """Ends a check early with a result (the array or materialization is missing)."""

    def __init__(self, result: dg.AssetCheckResult) -> None:
        super().__init__(result.description)
        self.result = result


def _keys(assets_or_keys: Iterable[AssetRef]) -> list[dg.AssetKey]:
    keys: list[dg.AssetKey] = []
    for a in assets_or_keys:
        if isinstance(a, dg.AssetsDefinition):
            keys.extend(a.keys)
        elif isinstance(a, dg.AssetSpec):
            keys.append(a.key)
        elif isinstance(a, dg.AssetKey):
            keys.append(a)
        elif isinstance(a, str):
            keys.append(dg.AssetKey.from_user_string(a))
        else:
            keys.append(dg.AssetKey(list(a)))
    return list(dict.fromkeys(keys))


def _producer_ids(log: DSLog, metadata: Mapping[str, Any], rec: ArrayRecord) -> list[str]:
    """Operations that wrote this array version.

    The IO manager names the one operation it registered (``dslog/op_id``), and registers no
    operation for a source array: reading that is a file lookup, where asking the catalog opens
    and syncs the DuckDB file (tens of milliseconds per check). Materializations written by
    other means fall back to the catalog.
    """
    op_id = metadata.get(m.OP_ID)
    if op_id is not None:
        return [str(getattr(op_id, "value", op_id))]
    obtained = metadata.get(m.OBTAINED)
    if obtained is not None and str(getattr(obtained, "value", obtained)) == "source":
        return []
    ids = log.store.catalog.column(
        "SELECT DISTINCT op_id FROM operation_arrays WHERE role = 'output' AND array_id = ? "
        "ORDER BY op_id",
        [rec.array_id],
    )
    return [str(i) for i in ids]


def _meta_text(metadata: Mapping[str, Any], key: str) -> str | None:
    v = metadata.get(key)
    return None if v is None else str(getattr(v, "value", v))


def _lost(log: DSLog) -> str:
    """What a store with group commit adds to a "no lineage" message (empty otherwise)."""
    if not log.store.group_commit:
        return ""
    return (
        " (This store uses group_commit: a power loss before the flush also loses lineage "
        "this way; if the machine went down after this run, materialize it again.)"
    )


def _missing_lineage(key: dg.AssetKey, name: str, run_id: str, log: DSLog, mat: Any) -> str:
    """Why the store this check reads has no lineage for the materialization, and what to do."""
    what = f"`{key.to_user_string()}` (array `{name}`, version = run `{run_id}`)"
    here = f"this check reads the lineage store `{log.store.root}` (its `dslog` resource's)"
    obtained = _meta_text(mat.metadata, m.OBTAINED)
    if obtained is None:
        return (
            f"The latest materialization of {what} has no lineage: its IO manager records none "
            "(no dslog/* metadata). Store the asset with DSLogIOManager or with_lineage(...) "
            "and materialize it again."
        )
    if obtained in ("off", "none"):
        return (
            f"The latest materialization of {what} recorded no lineage (dslog/obtained = "
            f"{obtained}: policy off, or reuse_only without a view). Materialize it with the "
            "capture policy to check its lineage."
        )
    versions = [r.version for r in log.store.arrays() if r.name == name]
    if versions:
        found = f"the store has {len(versions)} other version(s) of `{name}`, not this one"
    elif not log.store.arrays():
        found = "that store is empty"
    else:
        found = f"that store has no array `{name}`"
    return (
        f"The IO manager recorded lineage for {what} (dslog/obtained = {obtained}), but "
        f"{here} and {found}: the IO manager wrote it to another store.{_lost(log)} Give the "
        "IO manager the DSLogResource bound under `dslog` (DSLogIOManager(dslog=dslog, ...) or "
        "with_lineage(io, dslog)), or the same store_dir and $DSLOG_STORE, and materialize "
        "again."
    )


def _locate(context: dg.AssetCheckExecutionContext, log: DSLog, key: dg.AssetKey) -> _Located:
    entry = context.instance.get_latest_materialization_event(key)
    mat = entry.asset_materialization if entry is not None else None
    if entry is None or mat is None:
        raise _Fail(
            dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"`{key.to_user_string()}` has not been materialized yet: "
                "materialize it, then run its checks.",
            )
        )
    name = array_name(key, mat.partition)
    meta_base = {m.CHECK_ARRAY: name, m.CHECK_VERSION: entry.run_id}
    if _meta_text(mat.metadata, m.OBTAINED) == "source":
        raise _Fail(
            dg.AssetCheckResult(
                passed=True,
                description=f"`{key.to_user_string()}` is a source: its step read no tracked "
                "input, so it has no lineage to check (its cells are where lineage starts).",
                metadata=meta_base,
            )
        )
    if _meta_text(mat.metadata, m.OBTAINED) == "on_demand":
        raise _Fail(
            dg.AssetCheckResult(
                passed=True,
                description=f'`{key.to_user_string()}` ran with policy="on_demand": its lineage '
                "is captured when a query needs it (the query re-runs the step and checks it "
                "gives this value), so there is no stored lineage to check yet.",
                metadata=meta_base,
            )
        )
    try:
        rec = log.store.get_array(name, entry.run_id)
    except LineageNotFoundError as e:
        raise _Fail(
            dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.ERROR,
                description=_missing_lineage(key, name, entry.run_id, log, mat),
                metadata=meta_base,
            )
        ) from e
    except DSLogError as e:
        raise _Fail(
            dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.ERROR,
                description=(
                    f"The lineage of `{key.to_user_string()}` (array `{name}`, version = run "
                    f"`{entry.run_id}`) cannot be read from `{log.store.root}`: {e}"
                ),
                metadata=meta_base,
            )
        ) from e
    ids = _producer_ids(log, mat.metadata, rec)
    producers = []
    for op_id in ids:
        try:
            producers.append(log.store.get_operation(op_id))
        except Exception as e:  # a torn segment raises Arrow errors too: that is the finding
            raise _Fail(
                dg.AssetCheckResult(
                    passed=False,
                    severity=dg.AssetCheckSeverity.ERROR,
                    description=f"The operation `{op_id}` that wrote `{name}` is unreadable: {e} "
                    "Run `dslog fsck` on the store, then materialize the asset again.",
                    metadata={**meta_base, m.OP_ID: op_id},
                )
            ) from e
    return _Located(entry.run_id, mat.partition, dict(mat.metadata), rec, producers)


def _base_meta(loc: _Located) -> dict[str, Any]:
    return {
        m.CHECK_ARRAY: loc.array.name,
        m.CHECK_VERSION: loc.run_id,
        m.CHECK_STORE_SHAPE: str(loc.array.shape),
        m.CHECK_OPERATIONS: len(loc.producers),
    }


def _tables(loc: _Located) -> list[tuple[OperationRecord, str]]:
    """(operation, input name) of every table whose output is the located array."""
    return [(op, t.input) for op in loc.producers for t in op.tables if t.output == loc.array.name]


def _check_readable(log: DSLog, loc: _Located) -> dg.AssetCheckResult:
    meta = _base_meta(loc)
    if not loc.producers:
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=(
                f"Array `{loc.array.name}` version `{loc.run_id}` is registered but no operation "
                "wrote it, so it has no lineage to read. If the asset is a source, leave it out "
                "of lineage_checks; otherwise materialize it with a tracked decorator."
                f"{_lost(log)}"
            ),
            metadata=meta,
        )
    errors: list[str] = []
    pairs = 0
    tables = _tables(loc)
    for op, inp in tables:
        try:
            # Reading decodes and validates the table; expanding it cell by cell would prove
            # nothing more and cost seconds on big arrays. The pair count is in the table.
            table = log.store.read_lineage(op, loc.array.name, inp)
            pairs += int(table.n_pairs)
        except Exception as e:  # any failure to read is the finding; report, do not crash
            errors.append(f"{op.op_name} ({op.op_id[:12]}…) {loc.array.name} ← {inp}: {e}")
    meta.update({m.CHECK_TABLES: len(tables), m.CHECK_PAIRS: pairs})
    if errors:
        meta[m.CHECK_ERRORS] = dg.MetadataValue.json(errors)
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"{len(errors)} of {len(tables)} lineage table(s) are unreadable: "
            + errors[0]
            + " Run `dslog fsck` on the store, then materialize the asset again.",
            metadata=meta,
        )
    return dg.AssetCheckResult(
        passed=True,
        description=f"{len(tables)} lineage table(s), {pairs:,} cell pairs, all readable.",
        metadata=meta,
    )


def _recorded_shape(metadata: Mapping[str, Any]) -> tuple[str, tuple[int, ...] | None, int | None]:
    """(where it came from, full shape or None, first-axis length or None)."""

    def raw(v: Any) -> Any:
        return getattr(v, "value", v)

    if m.SHAPE in metadata:
        v = raw(metadata[m.SHAPE])
        if isinstance(v, str):
            v = json.loads(v.replace("(", "[").replace(")", "]").replace(",]", "]"))
        return m.SHAPE, tuple(int(x) for x in v), None
    if "dagster/row_count" in metadata:
        return "dagster/row_count", None, int(raw(metadata["dagster/row_count"]))
    return "", None, None


def _check_shape(log: DSLog, loc: _Located) -> dg.AssetCheckResult:
    meta = _base_meta(loc)
    problems: list[str] = []
    try:
        source, full, rows = _recorded_shape(loc.metadata)
    except (ValueError, TypeError) as e:
        source, full, rows = m.SHAPE, None, None
        problems.append(f"`{m.SHAPE}` metadata is not a shape: {e}")
    meta[m.CHECK_SHAPE_SOURCE] = source or "not recorded (store shapes checked only)"
    if full is not None and full != loc.array.shape:
        problems.append(f"materialized shape {full} ≠ stored shape {loc.array.shape}")
    if rows is not None and (not loc.array.shape or loc.array.shape[0] != rows):
        problems.append(f"materialized row count {rows} ≠ stored shape {loc.array.shape}")
    for op, inp in _tables(loc):
        in_rec = next((a for a in op.inputs if a.name == inp), None)
        try:
            table = log.store.read_lineage(op, loc.array.name, inp)
        except Exception as e:  # unreadable tables are the readable check's finding
            problems.append(f"{loc.array.name} ← {inp}: unreadable ({type(e).__name__})")
            continue
        out_rec = next((a for a in op.outputs if a.name == loc.array.name), loc.array)
        want = (out_rec.shape, in_rec.shape if in_rec else None)
        if out_rec.shape != loc.array.shape:
            problems.append(
                f"operation {op.op_name} recorded output shape {out_rec.shape}, the store has "
                f"{loc.array.shape}"
            )
        if (table.out_shape, table.in_shape) != want:
            problems.append(
                f"{op.op_name} table {loc.array.name} ← {inp} connects shapes "
                f"{table.out_shape} ← {table.in_shape}, the arrays are {want[0]} ← {want[1]}"
            )
    if problems:
        meta[m.CHECK_PROBLEMS] = dg.MetadataValue.json(problems)
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description="Lineage does not match the shapes: "
            + "; ".join(problems[:3])
            + ". Materialize the asset again; if it stays, report it as a dslog bug.",
            metadata=meta,
        )
    what = f" and the materialized shape ({source})" if source else ""
    return dg.AssetCheckResult(
        passed=True,
        description=f"Lineage tables agree with the stored shape {loc.array.shape}{what}.",
        metadata=meta,
    )


def _declared_constants(loc: _Located, constant: Sequence[str] | None) -> tuple[CellSet, list[str]]:
    boxes = list(constant or ())
    if m.CONSTANT_CELLS in loc.metadata:
        v = getattr(loc.metadata[m.CONSTANT_CELLS], "value", loc.metadata[m.CONSTANT_CELLS])
        boxes += list(json.loads(v) if isinstance(v, str) else v)
    return cells_from_spec(loc.array.shape, boxes), boxes


def _check_coverage(
    log: DSLog,
    loc: _Located,
    constant: Sequence[str] | None,
    severity: dg.AssetCheckSeverity,
) -> dg.AssetCheckResult:
    meta = _base_meta(loc)
    if loc.producers and all(not op.inputs for op in loc.producers):
        return dg.AssetCheckResult(
            passed=True,
            description="Source asset: its operation reads no tracked input, so every cell "
            "is a constant of the pipeline.",
            metadata=meta,
        )
    try:
        consts, boxes = _declared_constants(loc, constant)
    except (DSLogError, ValueError) as e:
        return dg.AssetCheckResult(
            passed=False,
            severity=severity,
            description=f"The constant cells declared for `{loc.array.name}` are not boxes of "
            f"its shape {loc.array.shape}: {e} Fix `constant_cells` or `{m.CONSTANT_CELLS}`.",
            metadata=meta,
        )
    covered = consts
    for op, inp in _tables(loc):
        in_rec = next(a for a in op.inputs if a.name == inp)
        try:
            hop = prepare(log.store.read_lineage(op, loc.array.name, inp))
        except Exception as e:  # reported by the readable check; cannot count coverage
            return dg.AssetCheckResult(
                passed=False,
                severity=severity,
                description=f"Cannot measure coverage: lineage {loc.array.name} ← {inp} is "
                f"unreadable ({e}).",
                metadata=meta,
            )
        covered = covered | hop.run(CellSet.full(in_rec.shape), "forward")
    missing = _complement(covered)
    total = covered.count() + missing.count()
    meta.update(
        {
            m.CHECK_CELLS: total,
            m.CHECK_CELLS_WITH_LINEAGE: covered.count() - consts.count(),
            m.CHECK_CONSTANT_CELLS_DECLARED: consts.count(),
            m.CHECK_CELLS_WITHOUT_LINEAGE: missing.count(),
        }
    )
    if boxes:
        meta[m.CHECK_CONSTANT_BOXES] = dg.MetadataValue.json(boxes)
    if missing.is_empty():
        return dg.AssetCheckResult(
            passed=True,
            description=f"All {total:,} cells have lineage"
            + (f" or are declared constant ({consts.count():,})." if boxes else "."),
            metadata=meta,
        )
    first = format_box(missing.start[0], missing.stop[0])
    meta[m.CHECK_UNCOVERED_PREVIEW] = boxes_preview(missing, 10)
    meta[m.CHECK_UNCOVERED_PICTURE] = dg.MetadataValue.md(
        cells_markdown(f"cells of {loc.array.name} without lineage", missing)
    )
    return dg.AssetCheckResult(
        passed=False,
        severity=severity,
        description=(
            f"{missing.count():,} of {total:,} cells of `{loc.array.name}` have no lineage and "
            f"are not declared constant (first box: {first}). If the step sets "
            f"them to constants on purpose, declare them: lineage_checks(constant_cells="
            f'{{"{loc.array.name}": ["{first}"]}}) or `{m.CONSTANT_CELLS}` '
            "metadata; otherwise the capture lost them: report it as a dslog bug."
        ),
        metadata=meta,
    )


def _complement(cells: CellSet) -> CellSet:
    """Cells of the array not in ``cells`` (via a mask: checks run on arrays that fit)."""
    return CellSet.from_mask(~cells.to_mask(), cells.shape)


def _expects_lineage(assets_or_keys: Iterable[AssetRef]) -> list[dg.AssetKey]:
    """The keys to check: every asset with an upstream asset (a source asset has no lineage);
    keys given as keys or strings are all checked (a source then passes at run time)."""
    keys: list[dg.AssetKey] = []
    for a in assets_or_keys:
        if isinstance(a, dg.AssetsDefinition):
            keys += [k for k in a.keys if any(d.asset_key != k for d in a.specs_by_key[k].deps)]
        elif isinstance(a, dg.AssetSpec):
            if any(d.asset_key != a.key for d in a.deps):
                keys.append(a.key)
        else:
            keys += _keys([a])
    return list(dict.fromkeys(keys))


def lineage_checks(
    assets_or_keys: Iterable[AssetRef],
    *,
    resource_key: str = DEFAULT_RESOURCE_KEY,
    constant_cells: Mapping[str, Sequence[str]] | None = None,
    coverage_severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.WARN,
    blocking: bool = False,
) -> list[dg.AssetChecksDefinition]:
    """The lineage checks (readable, shape, coverage) of each asset, one step per asset; see
    the module doc. Source assets (definitions or specs without upstream assets) get none.

    Args:
        assets_or_keys: assets definitions, specs, keys or ``"a/b"`` strings.
        resource_key: key of the ``DSLogResource``.
        constant_cells: per asset key string (``"a/b"``), box strings of cells that have no
            lineage on purpose (e.g. a constant border): ``{"images/padded": ["0,:"]}``.
        coverage_severity: severity of a coverage failure (WARN by default).
        blocking: make failing ERROR checks block downstream materializations.

    Examples:
        >>> import numpy as np
        >>> from dslog_dagster import DSLogResource, tracked_asset
        >>> @tracked_asset
        ... def raw() -> np.ndarray:
        ...     return np.ones((4, 4))
        >>> @tracked_asset
        ... def smoothed(raw: np.ndarray) -> np.ndarray:
        ...     return raw * 2
        >>> checks = lineage_checks([raw, smoothed])  # raw is a source: no checks
        >>> sorted(s.name for c in checks for s in c.check_specs)
        ['dslog_lineage_coverage', 'dslog_lineage_readable', 'dslog_lineage_shape']
        >>> defs = dg.Definitions(assets=[raw, smoothed], asset_checks=checks,
        ...                       resources={"dslog": DSLogResource(store_dir=".dslog")})
    """
    return [
        _asset_checks(
            key,
            resource_key,
            blocking,
            (constant_cells or {}).get(key.to_user_string()),
            coverage_severity,
        )
        for key in _expects_lineage(assets_or_keys)
    ]


_READABLE_DOC = (
    "ERROR if the stored lineage of the latest materialization is missing or unreadable."
)
_SHAPE_DOC = "ERROR if the stored lineage disagrees with the asset's (materialized) shape."
_COVERAGE_DOC = "Every output cell has lineage or is declared constant (WARN by default)."


def _asset_checks(
    key: dg.AssetKey,
    resource_key: str,
    blocking: bool,
    constant: Sequence[str] | None,
    coverage_severity: dg.AssetCheckSeverity,
) -> dg.AssetChecksDefinition:
    """The three checks of ``key`` as one ``multi_asset_check``: one step locates the
    materialization's lineage once and runs all three on it."""
    bodies: list[tuple[str, str, Callable[[DSLog, _Located], dg.AssetCheckResult]]] = [
        (CHECK_READABLE, _READABLE_DOC, _check_readable),
        (CHECK_SHAPE, _SHAPE_DOC, _check_shape),
        (
            CHECK_COVERAGE,
            _COVERAGE_DOC,
            lambda log, loc: _check_coverage(log, loc, constant, coverage_severity),
        ),
    ]
    specs = [
        dg.AssetCheckSpec(name, asset=key, description=doc, blocking=blocking)
        for name, doc, _ in bodies
    ]

    @dg.multi_asset_check(
        specs=specs,
        name=f"dslog_lineage_checks__{key.to_python_identifier()}",
        required_resource_keys={resource_key},
        description=f"Lineage checks of {key.to_user_string()}: readable, shape, coverage.",
    )
    def _checks(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        log: DSLog = getattr(context.resources, resource_key).session_for(context)
        try:
            loc = _locate(context, log, key)
        except _Fail as f:
            for name, _, _ in bodies:
                yield _named(f.result, key, name)
            return
        for name, _, body in bodies:
            yield _named(body(log, loc), key, name)

    return _checks


def _named(result: dg.AssetCheckResult, key: dg.AssetKey, name: str) -> dg.AssetCheckResult:
    """``result`` as the result of check ``name`` of ``key`` (a multi-check names each)."""
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=name,
        passed=result.passed,
        severity=result.severity,
        description=result.description,
        metadata=result.metadata,
    )
