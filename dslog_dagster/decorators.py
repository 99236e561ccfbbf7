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
4. runs the function — once, unless the step is declared ``pure=True`` (then reuse may re-run
   it on synthetic inputs and samples) — under the annotator
   (:func:`dslog_dagster.tracking.obtain_lineage`) or served from a reuse view, and
   hands one :class:`~dslog_dagster.tracked_step.PendingLineage` per output to the IO manager
   through the step's :class:`~dslog_dagster.tracked_step.TrackedStep`; the IO manager stores
   the value and then the lineage.

The wrapper's body is :func:`dslog_dagster.step_runner.run_tracked_step`.

Spark steps: when the tracked inputs are Spark DataFrames (loaded by ``DSLogIOManager``, which
keeps their stored row ids aside), step 4 is the relational capture instead
(:func:`dslog_dagster.spark.steps.capture_step`): the function sees ``TrackedFrame`` objects
and returns frames, or ``as_array(frame, columns)`` to hand a NumPy array to NumPy steps.

Under capture the function sees float64 arrays: deferred arrays that become ``tracked_float``
arrays at the first operation off the element-wise fast path (with ``defer=False``,
``tracked_float`` arrays from the start), and its outputs are float64 arrays; the docs'
"NumPy capture" page (``docs/concepts/capture.md``) lists what NumPy code is supported. Steps
that need integer or boolean outputs, or non-NumPy code, use ``policy="all_to_all"`` (flagged
over-approximation) or ``policy="off"``. To compute plain numbers for logs or metadata inside a
captured step, use :func:`plain`. Called directly (outside a Dagster run) a decorated function
runs unchanged, without capture.
"""

import functools
import inspect
import typing
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

import dagster as dg

from dslog_dagster.core.on_demand import register_step_function
from dslog_dagster.declared_lineage import declared_lineage
from dslog_dagster.errors import DSLogError
from dslog_dagster.policy import CapturePolicy, LineageMode
from dslog_dagster.step_runner import StepOptions, run_tracked_step
from dslog_dagster.values import plain, plain_arrays

__all__ = ["plain", "tracked_asset", "tracked_multi_asset", "tracked_op"]

F = TypeVar("F", bound=Callable[..., Any])


# ------------------------------------------------------------------ decorators


def _check_policy(
    policy: CapturePolicy | str | None, mode: LineageMode | str | None
) -> tuple[CapturePolicy | None, LineageMode | None]:
    """The decorator's policy and mode as enums (``None``: the IO manager's settings decide)."""
    try:
        checked_policy = CapturePolicy(policy) if policy is not None else None
    except ValueError:
        msg = f"`policy` must be one of {', '.join(CapturePolicy)}, not {policy!r}."
        raise DSLogError(msg) from None
    try:
        checked_mode = LineageMode(mode) if mode is not None else None
    except ValueError:
        msg = f'`mode` must be "contributing" or "considered", not {mode!r}.'
        raise DSLogError(msg) from None
    return checked_policy, checked_mode


def _options(
    policy: CapturePolicy | str | None,
    mode: LineageMode | str | None,
    untracked_inputs: Iterable[str],
    op_code_version: str | None,
    pure: bool,
    lineage: object,
    fn: Callable[..., Any],
    *,
    multi: bool,
    characters: bool = False,
    defer: bool = True,
) -> StepOptions:
    """The decorator's arguments, checked when the decorator runs (so a mistake fails at
    import, not in a run)."""
    checked_policy, checked_mode = _check_policy(policy, mode)
    declared = declared_lineage(lineage, fn, multi_output=multi)
    if declared is not None and checked_policy not in (None, CapturePolicy.off):
        msg = (
            f"Step `{getattr(fn, '__name__', 'step')}` declares its lineage (`lineage=`), so "
            f'nothing is captured and `policy="{checked_policy}"` does not apply; drop `policy=` '
            '(or use policy="off" to record no lineage).'
        )
        raise DSLogError(msg)
    if not isinstance(characters, bool):
        msg = f"`characters` must be True or False, not {characters!r}."
        raise DSLogError(msg)
    if declared is not None and characters:
        msg = (
            f"Step `{getattr(fn, '__name__', 'step')}` declares its lineage (`lineage=`), which "
            "names cells, not characters; drop `characters=True` (character lineage is captured "
            "for Spark and pandas steps)."
        )
        raise DSLogError(msg)
    if not isinstance(defer, bool):
        msg = f"`defer` must be True or False, not {defer!r}."
        raise DSLogError(msg)
    if declared is not None and not defer:
        msg = (
            f"Step `{getattr(fn, '__name__', 'step')}` declares its lineage (`lineage=`), so "
            "nothing is captured and its inputs are never deferred; drop `defer=False`."
        )
        raise DSLogError(msg)
    untracked = frozenset(untracked_inputs)
    return StepOptions(
        checked_policy,
        checked_mode,
        untracked,
        op_code_version,
        pure,
        declared,
        characters,
        defer,
    )


@overload
def tracked_asset(compute_fn: F) -> dg.AssetsDefinition: ...
@overload
def tracked_asset(
    compute_fn: None = None,
    *,
    policy: CapturePolicy | str | None = None,
    mode: LineageMode | str | None = None,
    untracked_inputs: Iterable[str] = (),
    pure: bool = False,
    lineage: object = None,
    characters: bool = False,
    defer: bool = True,
    **asset_kwargs: Any,
) -> Callable[[F], dg.AssetsDefinition]: ...
def tracked_asset(
    compute_fn: Callable[..., Any] | None = None,
    *,
    policy: CapturePolicy | str | None = None,
    mode: LineageMode | str | None = None,
    untracked_inputs: Iterable[str] = (),
    pure: bool = False,
    lineage: object = None,
    characters: bool = False,
    defer: bool = True,
    **asset_kwargs: Any,
) -> Any:
    """``@dg.asset`` with cell-level lineage of its NumPy inputs (usable bare or with args).

    Args:
        policy: ``"capture"``, ``"all_to_all"``, ``"reuse_only"`` or ``"off"``
            (:class:`dslog_dagster.policy.CapturePolicy`); ``None`` takes the
            :class:`~dslog_dagster.DSLogResource` default of the output's IO manager.
        mode: ``"contributing"`` or ``"considered"``; ``None`` takes the resource default.
        untracked_inputs: inputs passed through as parameters, without lineage.
        pure: declare the function pure (no side effects; the same inputs give the same
            output). Only then may reuse run it more than once per materialization: probes
            on synthetic inputs before confirming a view, sampled re-runs to verify a served
            one. By default (False) the function runs exactly once per materialization and
            views are confirmed from observed runs alone (``dslog/record`` says how).
        defer: ``True`` (default): a NumPy step's function gets deferred arrays
            (:class:`~dslog_dagster.core.deferred.DeferredArray`) that run element-wise code
            on plain NumPy and are annotated only at the first other operation, the cheaper
            capture. ``False``: it gets annotated ``tracked_float`` ndarrays from the start
            (:attr:`Capture.defer <dslog_dagster.core.capture.Capture.defer>`), for code that
            checks ``isinstance(x, np.ndarray)`` on its inputs or passes them to a library
            (compiled code) that takes ndarrays only; such a step otherwise fails with a
            ``CaptureError`` saying so.
            Values and lineage are the same either way. Spark and pandas steps are captured
            without deferred arrays, so it has no effect on them.
        lineage: declare the lineage instead of capturing it, for code the annotator cannot
            run (compiled code, external services, non-float outputs): one of the core API's
            capture forms (a per-cell callable ``capture(out_index) -> input cells``,
            ``(output box, input box)`` pairs, a pair matrix, a ``LineageRelation`` or
            ``LineageTable``) for the only tracked input, or ``{input name: form or None}``.
            The function runs once, unannotated; the declaration is checked against the real
            shapes, stored and queried like captured lineage, and shown as ``declared``
            (:mod:`dslog_dagster.declared_lineage`).
        characters: also record character-range lineage for the string columns of a Spark or
            pandas step (which characters of which input cells each output character came
            from: ``substring``, ``split``, ``regexp_extract``, ``.str`` methods...; see the
            docs' "Character lineage"), stored with the step's operation and queried with
            ``dslog query --chars`` or
            :func:`~dslog_dagster.core.character_trace.trace_character_range`. Costs a pass
            over the string values; a NumPy step with it is refused.
        **asset_kwargs: everything ``dg.asset`` accepts.

    Examples:
        .. code-block:: python

            @tracked_asset(code_version="1")
            def smoothed(image: np.ndarray) -> np.ndarray:
                return (image[:-1] + image[1:]) / 2

            @tracked_asset(lineage=lambda b: [(b[0] + k,) for k in range(3)])
            def window_sums(series: np.ndarray) -> np.ndarray:  # opaque to the annotator
                return compiled_moving_sum(series, 3)
    """

    def deco(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        opts = _options(
            policy, mode, untracked_inputs, None, pure, lineage, fn,
            multi=False, characters=characters, defer=defer,
        )  # fmt: skip
        defined: dg.AssetsDefinition = dg.asset(**asset_kwargs)(_wrap(fn, opts))
        return defined

    return deco(compute_fn) if compute_fn is not None else deco


def tracked_multi_asset(
    *,
    policy: CapturePolicy | str | None = None,
    mode: LineageMode | str | None = None,
    untracked_inputs: Iterable[str] = (),
    pure: bool = False,
    lineage: object = None,
    characters: bool = False,
    defer: bool = True,
    **multi_asset_kwargs: Any,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """``@dg.multi_asset`` with lineage: every output asset gets its own operation in the
    store, with lineage from every tracked input. Return a tuple in ``outs`` order or yield
    ``dg.Output`` objects (other yielded events, e.g. check results, pass through).
    ``pure``, ``characters``, ``defer``: as for :func:`tracked_asset`. ``lineage``: as for
    :func:`tracked_asset`, keyed by output name (``{output: form or {input: form or None}}``)."""

    def deco(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        opts = _options(
            policy, mode, untracked_inputs, None, pure, lineage, fn,
            multi=True, characters=characters, defer=defer,
        )  # fmt: skip
        return dg.multi_asset(**multi_asset_kwargs)(_wrap(fn, opts))

    return deco


@overload
def tracked_op(compute_fn: F) -> dg.OpDefinition: ...
@overload
def tracked_op(
    compute_fn: None = None,
    *,
    policy: CapturePolicy | str | None = None,
    mode: LineageMode | str | None = None,
    untracked_inputs: Iterable[str] = (),
    pure: bool = False,
    lineage: object = None,
    characters: bool = False,
    defer: bool = True,
    **op_kwargs: Any,
) -> Callable[[F], dg.OpDefinition]: ...
def tracked_op(
    compute_fn: Callable[..., Any] | None = None,
    *,
    policy: CapturePolicy | str | None = None,
    mode: LineageMode | str | None = None,
    untracked_inputs: Iterable[str] = (),
    pure: bool = False,
    lineage: object = None,
    characters: bool = False,
    defer: bool = True,
    **op_kwargs: Any,
) -> Any:
    """``@dg.op`` with lineage. Op outputs that are not assets are named
    :func:`~dslog_dagster.naming.op_array_name` ``(step key, output name)`` in the store,
    versioned by run id. ``pure``, ``characters``, ``defer``: as for :func:`tracked_asset`.
    ``lineage``: as for :func:`tracked_asset`; keyed by output name when ``out`` is a dict of
    outputs."""

    def deco(fn: Callable[..., Any]) -> dg.OpDefinition:
        cv = op_kwargs.get("code_version") or op_kwargs.get("version")
        multi = isinstance(op_kwargs.get("out"), dict)
        opts = _options(
            policy, mode, untracked_inputs, cv, pure, lineage, fn,
            multi=multi, characters=characters, defer=defer,
        )  # fmt: skip
        defined: dg.OpDefinition = dg.op(**op_kwargs)(_wrap(fn, opts))
        return defined

    return deco(compute_fn) if compute_fn is not None else deco


# ------------------------------------------------------------------ the wrapper


def _wrap(fn: Callable[..., Any], opts: StepOptions) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        msg = (
            f"`{fn.__name__}` is async; tracked steps must be synchronous (the annotator runs "
            "NumPy code in the step's thread). Use a plain `def`, or Dagster's decorator "
            "without lineage."
        )
        raise DSLogError(msg)
    # any process that imports the step can re-run it for on-demand lineage
    register_step_function(fn, _config_rebuilder(fn))
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = _current_context()
            if ctx is None:
                yield from plain_arrays(list(fn(*args, **kwargs)))
                return
            yield from run_tracked_step(fn, ctx, args, kwargs, opts, is_gen=True)

        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = _current_context()
        if ctx is None:
            return plain_arrays(fn(*args, **kwargs))
        return run_tracked_step(fn, ctx, args, kwargs, opts, is_gen=False)

    return wrapper


def _config_rebuilder(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """How to rebuild ``fn``'s Dagster ``Config`` parameters from a deferred operation's
    recorded arguments (the op config is ``args["config"]``), for on-demand re-runs."""
    try:
        hints = typing.get_type_hints(fn)
        params = list(inspect.signature(fn).parameters)
    except (NameError, TypeError, ValueError):  # unresolvable annotations: no config rebuilt
        return None
    configs = {
        p: t for p in params if isinstance(t := hints.get(p), type) and issubclass(t, dg.Config)
    }
    if not configs:
        return None

    def rebuild(args: dict[str, Any]) -> dict[str, Any]:
        recorded = args.get("config") or {}
        return {p: t(**recorded) for p, t in configs.items()}

    return rebuild


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
