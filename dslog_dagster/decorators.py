"""``@tracked_asset``, ``@tracked_multi_asset`` and ``@tracked_op``.

Each is Dagster's decorator (``dg.asset``, ``dg.multi_asset``, ``dg.op``) applied to a wrapper
of the user's function made with :func:`functools.wraps`, so Dagster sees the user's exact
signature: context, config, resources, ``ins``, ``deps``, partitions, check specs, code
versions, retry policies and everything else pass through unchanged.

At run time the wrapper:

1. finds the lineage settings on the IO manager of the step's outputs (a
   :class:`~dslog_dagster.io_managers.DSLogIOManager` or an IO manager wrapped with
   :func:`~dslog_dagster.io_managers.with_lineage`); with any other IO manager nothing is
   tracked and a warning says so;
2. picks the tracked inputs: every input the function receives must be a real numeric (or
   boolean) NumPy array, unless it is listed in ``untracked_inputs`` (then it is an untracked
   parameter: no lineage from it). Anything else — DataFrames, dicts of partitions, lists,
   complex or object arrays — raises :class:`~dslog_dagster.errors.UnsupportedArrayError`
   naming the input, so lineage is never silently incomplete;
3. resolves each upstream array version (the run id of the materialization it came from, via
   the Dagster instance — also right when the upstream was materialized by an earlier run);
4. runs the function under the annotator (:func:`dslog_dagster.tracking.obtain_lineage`) and
   hands one :class:`~dslog_dagster.tracking.PendingLineage` per output to the IO manager,
   which stores the value and then the lineage.

Spark steps: when the tracked inputs are Spark DataFrames (loaded by ``DSLogIOManager``, which
keeps their stored row ids aside), step 4 is the relational capture instead
(:func:`dslog_dagster.spark.steps.capture_step`): the function sees ``TrackedFrame`` objects
and returns frames, or ``as_array(frame, columns)`` to hand a NumPy array to NumPy steps.

Under capture the function sees ``tracked_float`` arrays (float64 values) and its outputs are
float64 arrays; the README's "Capture semantics" lists what NumPy code is supported. Steps that
need integer or boolean outputs, or non-NumPy code, use ``policy="all_to_all"`` (flagged
over-approximation) or ``policy="off"``. To compute plain numbers for logs or metadata inside a
captured step, use :func:`plain`. Called directly (outside a Dagster run) a decorated function
runs unchanged, without capture.
"""

import functools
import inspect
import logging
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import dagster as dg
import numpy as np

from dslog_dagster.core.capture import TRACKED_FLOAT
from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.core.reuse.keys import Unsignable, code_identity
from dslog_dagster.errors import DSLogError, UnsupportedArrayError
from dslog_dagster.naming import array_name
from dslog_dagster.tracking import (
    POLICIES,
    InputRef,
    Mode,
    PendingLineage,
    Policy,
    lineage_of,
    obtain_lineage,
    pop_frame_input,
    stash_pending,
)

__all__ = ["op_array_name", "plain", "tracked_asset", "tracked_multi_asset", "tracked_op"]

_log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def op_array_name(step_key: str, output_name: str) -> str:
    """The store's array name of an op output that is not an asset: ``"<step key>:<output>"``."""
    return f"{step_key}:{output_name}"


def plain(x: Any) -> Any:
    """Plain float64 values of a (possibly tracked) array or scalar, dropping its lineage.

    Inside a captured step ``float(x)`` and ``x.astype(float)`` raise ``LineageLostError`` on
    purpose; call ``plain`` where a number is only needed for logging or metadata.
    """
    arr = np.asarray(x)
    if arr.dtype == TRACKED_FLOAT:
        vals = _annotator.values(arr)
        return vals if arr.ndim else np.float64(vals[()])
    return x


# ------------------------------------------------------------------ decorators


def _check_policy(policy: str | None, mode: str | None) -> None:
    if policy is not None and policy not in POLICIES:
        msg = f"`policy` must be one of {', '.join(POLICIES)}, not {policy!r}."
        raise DSLogError(msg)
    if mode is not None and mode not in ("contributing", "considered"):
        msg = f'`mode` must be "contributing" or "considered", not {mode!r}.'
        raise DSLogError(msg)


@overload
def tracked_asset(compute_fn: F) -> dg.AssetsDefinition: ...
@overload
def tracked_asset(
    compute_fn: None = None,
    *,
    policy: Policy | None = None,
    mode: Mode | None = None,
    untracked_inputs: Iterable[str] = (),
    **asset_kwargs: Any,
) -> Callable[[F], dg.AssetsDefinition]: ...
def tracked_asset(
    compute_fn: Callable[..., Any] | None = None,
    *,
    policy: Policy | None = None,
    mode: Mode | None = None,
    untracked_inputs: Iterable[str] = (),
    **asset_kwargs: Any,
) -> Any:
    """``@dg.asset`` with cell-level lineage of its NumPy inputs (usable bare or with args).

    Args:
        policy: ``"capture"``, ``"all_to_all"``, ``"reuse_only"`` or ``"off"``
            (:data:`dslog_dagster.tracking.Policy`); ``None`` takes the
            :class:`~dslog_dagster.DSLogResource` default of the output's IO manager.
        mode: ``"contributing"`` or ``"considered"``; ``None`` takes the resource default.
        untracked_inputs: inputs passed through as parameters, without lineage.
        **asset_kwargs: everything ``dg.asset`` accepts.

    Examples:
        .. code-block:: python

            @tracked_asset(code_version="1")
            def smoothed(image: np.ndarray) -> np.ndarray:
                return (image[:-1] + image[1:]) / 2
    """
    _check_policy(policy, mode)
    untracked = frozenset(untracked_inputs)

    def deco(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        defined: dg.AssetsDefinition = dg.asset(**asset_kwargs)(_wrap(fn, policy, mode, untracked))
        return defined

    return deco(compute_fn) if compute_fn is not None else deco


def tracked_multi_asset(
    *,
    policy: Policy | None = None,
    mode: Mode | None = None,
    untracked_inputs: Iterable[str] = (),
    **multi_asset_kwargs: Any,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """``@dg.multi_asset`` with lineage: every output asset gets its own operation in the
    store, with lineage from every tracked input. Return a tuple in ``outs`` order or yield
    ``dg.Output`` objects (other yielded events, e.g. check results, pass through)."""
    _check_policy(policy, mode)
    untracked = frozenset(untracked_inputs)

    def deco(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        return dg.multi_asset(**multi_asset_kwargs)(_wrap(fn, policy, mode, untracked))

    return deco


@overload
def tracked_op(compute_fn: F) -> dg.OpDefinition: ...
@overload
def tracked_op(
    compute_fn: None = None,
    *,
    policy: Policy | None = None,
    mode: Mode | None = None,
    untracked_inputs: Iterable[str] = (),
    **op_kwargs: Any,
) -> Callable[[F], dg.OpDefinition]: ...
def tracked_op(
    compute_fn: Callable[..., Any] | None = None,
    *,
    policy: Policy | None = None,
    mode: Mode | None = None,
    untracked_inputs: Iterable[str] = (),
    **op_kwargs: Any,
) -> Any:
    """``@dg.op`` with lineage. Op outputs that are not assets are named
    :func:`op_array_name` ``(step key, output name)`` in the store, versioned by run id."""
    _check_policy(policy, mode)
    untracked = frozenset(untracked_inputs)

    def deco(fn: Callable[..., Any]) -> dg.OpDefinition:
        cv = op_kwargs.get("code_version") or op_kwargs.get("version")
        defined: dg.OpDefinition = dg.op(**op_kwargs)(
            _wrap(fn, policy, mode, untracked, op_code_version=cv)
        )
        return defined

    return deco(compute_fn) if compute_fn is not None else deco


# ------------------------------------------------------------------ the wrapper


def _wrap(
    fn: Callable[..., Any],
    policy: str | None,
    mode: str | None,
    untracked: frozenset[str],
    op_code_version: str | None = None,
) -> Callable[..., Any]:
    opts = _Opts(policy, mode, untracked, op_code_version)
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        msg = (
            f"`{fn.__name__}` is async; tracked steps must be synchronous (the annotator runs "
            "NumPy code in the step's thread). Use a plain `def`, or Dagster's decorator "
            "without lineage."
        )
        raise DSLogError(msg)
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = _current_context()
            if ctx is None:
                yield from _plain_arrays(list(fn(*args, **kwargs)))
                return
            yield from _run(fn, ctx, args, kwargs, opts, is_gen=True)

        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = _current_context()
        if ctx is None:
            return _plain_arrays(fn(*args, **kwargs))
        return _run(fn, ctx, args, kwargs, opts, is_gen=False)

    return wrapper


def _current_context() -> dg.OpExecutionContext | None:
    """The running step's context; ``None`` when called directly (outside a run)."""
    for cls in (dg.AssetExecutionContext, dg.OpExecutionContext):
        try:
            ctx = cls.get()
        except (dg.DagsterInvariantViolationError, LookupError):
            continue
        if isinstance(ctx, dg.AssetExecutionContext):
            return ctx.op_execution_context
        return ctx
    return None


def _settings_for_outputs(ctx: dg.OpExecutionContext) -> tuple[Any, list[str]]:
    """The DSLogResource of the outputs' IO managers, and the keys of IO managers without one."""
    found = None
    plain_keys: list[str] = []
    for od in ctx.op_def.output_defs:
        key = od.io_manager_key
        io = getattr(ctx.resources, key, None)
        getter = getattr(io, "dslog_settings", None)
        if callable(getter):
            found = found or getter()
        elif key not in plain_keys:
            plain_keys.append(key)
    return found, plain_keys


def _is_trackable(v: Any) -> bool:
    if not isinstance(v, np.ndarray | np.generic):
        return False
    dt = np.asarray(v).dtype
    return bool(
        (np.issubdtype(dt, np.number) and not np.issubdtype(dt, np.complexfloating))
        or dt == np.bool_
    )


def _reject(name: str, value: Any, step: str) -> UnsupportedArrayError:
    what = f"a `{type(value).__module__}.{type(value).__name__}`"
    if isinstance(value, np.ndarray | np.generic):
        what = f"a NumPy array of dtype `{np.asarray(value).dtype}`"
    elif isinstance(value, dict):
        what = "a dict (several partitions or a fan-in)"
    msg = (
        f"Input `{name}` of tracked step `{step}` is {what}; tracked steps capture lineage of "
        "real numeric NumPy arrays only. Pass `untracked_inputs={"
        f"'{name}'" + "}` to treat it as a parameter without lineage, convert it to a NumPy "
        'array, or use policy="off" for this step. (Spark DataFrame inputs are tracked when '
        "they are loaded by DSLogIOManager.)"
    )
    return UnsupportedArrayError(msg)


def _upstream_run(ctx: dg.OpExecutionContext, key: dg.AssetKey, pk: str | None) -> str | None:
    """Run id of the latest materialization of ``key`` (partition ``pk``): the array version.

    Unpartitioned: Dagster's step already fetched the upstream's latest record for data
    versions, so its cache answers without another event-log query. Partitioned (the cache
    knows only the latest event of *any* partition) or observed: ask the instance.
    """
    if pk is None:
        try:
            info = ctx.get_step_execution_context().maybe_fetch_and_get_input_asset_version_info(
                key
            )
        except Exception:  # a private API moved: fall back to the public query
            info = None
        if info is not None and info.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
            return info.run_id
    records = ctx.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[pk] if pk else None), limit=1
    ).records
    return records[0].run_id if records else None


def _input_ref(ctx: dg.OpExecutionContext, name: str, run_id: str, step_key: str) -> InputRef:
    """Name and version of the array behind input ``name``."""
    key = None
    try:
        key = ctx.asset_key_for_input(name)
    except Exception:  # ops without asset inputs raise various Dagster errors here
        key = None
    if key is not None:
        pks: Sequence[str] = ()
        try:
            pks = ctx.asset_partition_keys_for_input(name)
        except Exception:  # unpartitioned upstream (Dagster raises a CheckError)
            pks = ()
        if len(pks) > 1:
            msg = (
                f"Input `{name}` of tracked step `{step_key}` spans {len(pks)} partitions of "
                f"`{key.to_user_string()}`; a tracked input must be one array version. Map one "
                "partition, or pass it in `untracked_inputs`."
            )
            raise UnsupportedArrayError(msg)
        pk = pks[0] if pks else None
        return InputRef(name, array_name(key, pk), _upstream_run(ctx, key, pk), "/".join(key.path))
    source = ctx.get_step_execution_context().step.step_input_named(name).source
    handle = getattr(source, "step_output_handle", None)
    if handle is not None:
        return InputRef(name, op_array_name(handle.step_key, handle.output_name), run_id, None)
    return InputRef(name, f"{step_key}:in:{name}", run_id, None)


@dataclass(frozen=True, slots=True)
class _Opts:
    """What the decorator was given (besides Dagster's own arguments)."""

    policy: str | None
    mode: str | None
    untracked: frozenset[str]
    op_code_version: str | None


def _op_identity(
    ctx: dg.OpExecutionContext, output_name: str, op_code_version: str | None = None
) -> tuple[str, str | None]:
    """Operation name (asset key or op name, ``@code_version``) of one output."""
    key = None
    cv = None
    if ctx.has_assets_def:
        key = ctx.assets_def.keys_by_output_name.get(output_name)
    if key is not None:
        cv = ctx.assets_def.code_versions_by_key.get(key)
        base = array_name(key)
    else:
        base = ctx.op_def.name
        cv = op_code_version
    return (f"{base}@{cv}" if cv else base), cv


def _op_args(ctx: dg.OpExecutionContext) -> dict[str, Any]:
    args: dict[str, Any] = {}
    cfg = ctx.op_config
    if cfg is not None:
        args["config"] = cfg
    if ctx.has_partition_key:
        args["partition_key"] = str(ctx.partition_key)
    return args


def _split_outputs(
    res: Any, ctx: dg.OpExecutionContext, is_gen: bool, step: str
) -> tuple[list[Any], list[str], Callable[[list[Any]], Any]]:
    """Values to capture, their output names, and how to rebuild the result from plain values."""
    out_defs = ctx.op_def.output_defs

    def as_output(o: dg.Output[Any], v: Any) -> dg.Output[Any]:
        return dg.Output(
            v, output_name=o.output_name, metadata=o.metadata, data_version=o.data_version,
            tags=o.tags,
        )  # fmt: skip

    if isinstance(res, dg.MaterializeResult):
        msg = (
            f"Tracked step `{step}` returned a MaterializeResult, which has no value for the IO "
            'manager to store; return the array (or dg.Output), or use policy="off".'
        )
        raise DSLogError(msg)
    if is_gen:
        events = list(res)
        idx = [i for i, e in enumerate(events) if isinstance(e, dg.Output)]
        if any(isinstance(e, dg.DynamicOutput) for e in events):
            msg = f"Tracked step `{step}` yields DynamicOutput; dynamic outputs are not tracked."
            raise DSLogError(msg)

        def rebuild_events(vals: list[Any]) -> list[Any]:
            out = list(events)
            for i, v in zip(idx, vals, strict=True):
                out[i] = as_output(events[i], v)
            return out

        return [events[i].value for i in idx], [events[i].output_name for i in idx], rebuild_events
    if len(out_defs) == 1 and not isinstance(res, tuple):
        if isinstance(res, dg.Output):
            return [res.value], [res.output_name], lambda v: as_output(res, v[0])
        return [res], [out_defs[0].name], lambda v: v[0]
    if not isinstance(res, tuple):
        msg = (
            f"Tracked step `{step}` has {len(out_defs)} outputs but returned a "
            f"`{type(res).__name__}`; return a tuple in `outs` order or yield dg.Output objects."
        )
        raise DSLogError(msg)
    names = [od.name for od in out_defs]
    if len(res) != len(names):
        selected = ctx.selected_output_names
        names = [n for n in names if n in selected]
    if len(res) != len(names):
        msg = f"Tracked step `{step}` returned {len(res)} values for outputs {names}."
        raise DSLogError(msg)
    names = [
        r.output_name if isinstance(r, dg.Output) else n for r, n in zip(res, names, strict=True)
    ]
    vals = [r.value if isinstance(r, dg.Output) else r for r in res]

    def rebuild_tuple(v: list[Any]) -> tuple[Any, ...]:
        return tuple(
            as_output(r, x) if isinstance(r, dg.Output) else x for r, x in zip(res, v, strict=True)
        )

    return vals, names, rebuild_tuple


def _run(
    fn: Callable[..., Any],
    ctx: dg.OpExecutionContext,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    opts: "_Opts",
    *,
    is_gen: bool,
) -> Any:
    started = time.perf_counter()
    policy, mode, untracked = opts.policy, opts.mode, opts.untracked
    step_key = ctx.get_step_execution_context().step.key
    run_id = ctx.run.run_id
    settings, plain_keys = _settings_for_outputs(ctx)
    eff_policy = policy or (settings.policy if settings is not None else "capture")
    eff_mode = mode or (settings.mode if settings is not None else "contributing")
    op_args = _op_args(ctx)

    def run_plain() -> Any:
        res = fn(*args, **kwargs)
        return _plain_arrays(list(res) if is_gen else res)

    if settings is None:
        ctx.log.warning(
            f"Step `{step_key}` is tracked, but its IO manager(s) {plain_keys} do not store "
            "lineage, so none is recorded. Use DSLogIOManager or with_lineage(...)."
        )
        return run_plain()

    def stash_untracked(names: list[str], obtained: str, status: str) -> None:
        for name in names:
            op_name, _ = _op_identity(ctx, name, opts.op_code_version)
            pending = PendingLineage(
                op_name, op_args, eff_policy, eff_mode, obtained=obtained, status=status,
                started=started,
            )  # fmt: skip
            stash_pending(run_id, step_key, name, pending)

    all_outputs = [od.name for od in ctx.op_def.output_defs]
    if eff_policy == "off":
        result = run_plain()
        stash_untracked(all_outputs, "off", 'policy="off": no lineage recorded.')
        return result
    names = [d.name for d in ctx.op_def.input_defs if d.name in kwargs and d.name not in untracked]
    untracked_args = [
        d.name for d in ctx.op_def.input_defs if d.name in kwargs and d.name in untracked
    ]
    if any(is_frame(kwargs[n]) for n in names):
        return _run_frames(
            fn, ctx, args, kwargs, opts,
            names=names, policy=eff_policy, mode=eff_mode, op_args=op_args, started=started,
            is_gen=is_gen, run_plain=run_plain, stash_untracked=stash_untracked,
        )  # fmt: skip
    for n in names:
        if not _is_trackable(kwargs[n]):
            raise _reject(n, kwargs[n], step_key)
    refs = tuple(_input_ref(ctx, n, run_id, step_key) for n in names)
    if not names:
        result = run_plain()
        stash_untracked(
            all_outputs, "source", "No tracked inputs: registered as a source array version."
        )
        return result

    holder: dict[str, Any] = {}

    def call(*tracked: Any, **_signature_args: Any) -> tuple[Any, ...]:
        # `_signature_args` only key reuse views (see obtain_lineage); the step never sees them.
        kw = dict(kwargs)
        kw.update(zip(names, tracked, strict=True))
        res = fn(*args, **kw)
        vals, out_names, rebuild = _split_outputs(res, ctx, is_gen, step_key)
        # The first call is the step's own; reuse may re-run it (verification, probes on
        # synthetic inputs), and those runs must not replace the outputs' Output objects.
        holder.setdefault("names", out_names)
        holder.setdefault("rebuild", rebuild)
        return tuple(vals)

    first_op, code_version = _op_identity(ctx, all_outputs[0], opts.op_code_version)
    registry, identity, sig_args, store = None, "", {}, None
    if settings.reuse:
        try:
            identity = f"{first_op}|{code_version}|{code_identity(fn)}"
            sig_args = {"op_args": op_args, **{f"input:{n}": kwargs[n] for n in untracked_args}}
            store = settings.store()
            registry = settings.registry(store=store)
        except Unsignable:
            registry = None  # a function whose code identity cannot be hashed is never reused
    result, seconds = obtain_lineage(
        call,
        [kwargs[n] for n in names],
        policy=eff_policy,  # type: ignore[arg-type]
        mode=eff_mode,  # type: ignore[arg-type]
        code_version=identity,
        signature_args=sig_args,
        reuse=registry,
    )
    if result is None:  # reuse_only without a confirmed view
        result_value = run_plain()
        stash_untracked(
            all_outputs,
            "none",
            'policy="reuse_only": no confirmed reuse view matched this call, so no lineage '
            "was recorded (the step ran unannotated).",
        )
        return result_value
    obtained = result.obtained
    signature = result.signature
    considered = eff_mode == "considered"
    for k, out_name in enumerate(holder["names"]):
        op_name, _ = _op_identity(ctx, out_name, opts.op_code_version)
        rels = tuple(lineage_of(result, k, i, considered=considered) for i in range(len(names)))
        pending = PendingLineage(
            op_name,
            op_args,
            eff_policy,
            eff_mode,
            inputs=refs,
            relations=rels,
            obtained=obtained,
            signature=signature,
            flagged=result.flagged,
            reason=result.reason,
            capture_s=seconds,
            started=started,
            annotation_bytes=result.annotation_bytes,
            store=store,
        )
        stash_pending(run_id, step_key, out_name, pending)
    return holder["rebuild"](list(result.value))


# ------------------------------------------------------------------ Spark steps


def is_frame(v: Any) -> bool:
    """A Spark DataFrame? (Checked without importing PySpark: no PySpark, no frames.)"""
    sql = sys.modules.get("pyspark.sql")
    return sql is not None and isinstance(v, sql.DataFrame)


def _plain_arrays(res: Any) -> Any:
    """Turn :func:`~dslog_dagster.spark.as_array` outputs of an untracked run into arrays."""
    steps = sys.modules.get("dslog_dagster.spark.steps")
    if steps is None:  # as_array was never imported, so nothing can be one
        return res

    def conv(v: Any) -> Any:
        if isinstance(v, steps.ArrayFromFrame):
            return steps.plain_array(v)
        if isinstance(v, dg.Output) and isinstance(v.value, steps.ArrayFromFrame):
            return dg.Output(
                steps.plain_array(v.value), output_name=v.output_name, metadata=v.metadata,
                data_version=v.data_version, tags=v.tags,
            )  # fmt: skip
        return v

    if isinstance(res, tuple):
        return tuple(conv(v) for v in res)
    if isinstance(res, list):
        return [conv(v) for v in res]
    return conv(res)


def _run_frames(
    fn: Callable[..., Any],
    ctx: dg.OpExecutionContext,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    opts: _Opts,
    *,
    names: list[str],
    policy: str,
    mode: str,
    op_args: dict[str, Any],
    started: float,
    is_gen: bool,
    run_plain: Callable[[], Any],
    stash_untracked: Callable[[list[str], str, str], None],
) -> Any:
    """A tracked step whose inputs are Spark DataFrames (:mod:`dslog_dagster.spark.steps`)."""
    from dslog_dagster.spark.rowid import ROW_ID
    from dslog_dagster.spark.steps import capture_step

    step_key = ctx.get_step_execution_context().step.key
    run_id = ctx.run.run_id
    all_outputs = [od.name for od in ctx.op_def.output_defs]
    frames: dict[str, Any] = {}
    rows: dict[str, int | None] = {}
    for n in names:
        value = kwargs[n]
        if not is_frame(value):
            msg = (
                f"Tracked step `{step_key}` mixes Spark DataFrame and `{type(value).__name__}` "
                f"inputs (`{n}`); a tracked step is either a Spark step or a NumPy step. Convert "
                "the frame in its own step with `as_array(frame, columns)`, or pass the other "
                "input in `untracked_inputs`."
            )
            raise UnsupportedArrayError(msg)
        src = pop_frame_input(run_id, step_key, n)
        if src is not None:
            frames[n], rows[n] = src.frame, src.rows
        elif ROW_ID in value.columns:
            frames[n], rows[n] = value, None
        else:
            msg = (
                f"Input `{n}` of tracked step `{step_key}` is a DataFrame stored without row "
                "ids, so lineage has no rows to name. Store the upstream asset with "
                "DSLogIOManager or with_lineage(<IO manager>) from a tracked step, pass the "
                'input in `untracked_inputs`, or use policy="off".'
            )
            raise UnsupportedArrayError(msg)
    refs = tuple(_input_ref(ctx, n, run_id, step_key) for n in names)
    if policy == "reuse_only":
        result = run_plain()
        stash_untracked(
            all_outputs,
            "none",
            'policy="reuse_only": reuse views serve NumPy steps only, so this Spark step ran '
            'without capture and recorded no lineage (use policy="capture").',
        )
        return result
    holder: dict[str, Any] = {}

    def call(k: int, tracked: Any) -> Any:
        kw = dict(kwargs)
        kw.update(tracked)
        res = fn(*args, **kw)
        vals, out_names, rebuild = _split_outputs(res, ctx, is_gen, step_key)
        holder.setdefault("names", out_names)
        holder.setdefault("rebuild", rebuild)
        return vals[k]

    outs = capture_step(
        call,
        frames,
        rows,
        n_outputs=lambda: len(holder["names"]),
        policy="all_to_all" if policy == "all_to_all" else "capture",
        considered=mode == "considered",
    )
    for out, out_name in zip(outs, holder["names"], strict=True):
        op_name, _ = _op_identity(ctx, out_name, opts.op_code_version)
        cap = out.capture
        reason = None
        if cap.flagged:
            reason = (
                f"No lineage rule for {', '.join(cap.flagged_ops)}: every output cell depending "
                "on it is recorded as depending on every cell of its inputs (over-approximation)."
            )
        pending = PendingLineage(
            op_name,
            op_args,
            policy,
            mode,
            inputs=refs,
            relations=tuple(out.tables[n] for n in names),
            obtained="captured",
            flagged=cap.flagged,
            reason=reason,
            capture_s=out.seconds,
            started=started,
            frame=None if out.is_array else cap,
            column_lineage=None if out.is_array else out.column_lineage,
            capture_method="spark-all-to-all" if cap.flagged else "spark",
        )
        stash_pending(run_id, step_key, out_name, pending)
    return holder["rebuild"]([o.value for o in outs])
