"""One run of a tracked step inside Dagster: what the decorators' wrapper does.

:func:`run_tracked_step` is the wrapper's body (see :mod:`dslog_dagster.decorators` for the
steps it takes). It attaches the step's :class:`~dslog_dagster.tracked_step.TrackedStep` to
Dagster's step context, runs the user function — under the annotator
(:func:`~dslog_dagster.tracking.obtain_lineage`) for NumPy inputs, under the relational capture
(:func:`~dslog_dagster.spark.steps.capture_step`) for Spark DataFrame inputs, or plainly — and
hands one :class:`~dslog_dagster.tracked_step.PendingLineage` per output over to the IO
manager. A failure in user code hands nothing over.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg
import numpy as np

from dslog_dagster.core import progress
from dslog_dagster.core.capture import CaptureResult
from dslog_dagster.core.capture import Mode as CaptureModeName
from dslog_dagster.core.on_demand import DEFERRED, deferred_args
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.core.reuse import ViewRegistry
from dslog_dagster.core.reuse.keys import Unsignable, code_identity
from dslog_dagster.declared_lineage import DeclaredLineage
from dslog_dagster.errors import ConfigurationError, DSLogError, ReuseError, UnsupportedArrayError
from dslog_dagster.naming import array_name, op_array_name
from dslog_dagster.policy import CapturePolicy, LineageMode
from dslog_dagster.resources import DSLogResource
from dslog_dagster.tracked_step import InputRef, PendingLineage, TrackedStep
from dslog_dagster.tracking import lineage_of, obtain_lineage
from dslog_dagster.values import is_frame, is_pandas_frame, is_trackable, plain_arrays

if TYPE_CHECKING:
    from dslog_dagster.core.provrc import LineageTable

__all__ = ["StepOptions", "run_tracked_step"]


@dataclass(frozen=True, slots=True)
class StepOptions:
    """What the decorator was given (besides Dagster's own arguments)."""

    policy: CapturePolicy | None
    mode: LineageMode | None
    untracked: frozenset[str]
    op_code_version: str | None
    #: declared pure (``pure=True``): reuse may run the function more than once
    pure: bool = False
    #: lineage the step declares (``lineage=``) instead of capturing it
    lineage: DeclaredLineage | None = None
    #: also record character-range lineage (``characters=True``; Spark and pandas steps)
    characters: bool = False
    #: hand a NumPy step deferred inputs (``defer=True``, the default) or annotated ndarrays
    #: from the start (``False``); see :class:`~dslog_dagster.core.capture.Capture`
    defer: bool = True


def run_tracked_step(
    fn: Callable[..., Any],
    ctx: dg.OpExecutionContext,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    opts: StepOptions,
    *,
    is_gen: bool,
) -> Any:
    """Run ``fn(*args, **kwargs)`` as the tracked step of ``ctx``; returns what Dagster gets
    (for a generator function, the list of its events)."""
    return _StepRun(fn, ctx, args, kwargs, opts, is_gen=is_gen).run()


def _settings_for_outputs(ctx: dg.OpExecutionContext) -> tuple[DSLogResource | None, list[str]]:
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


class _StepRun:
    """One call of a tracked step's wrapper: the step, its settings and its runtime."""

    def __init__(
        self,
        fn: Callable[..., Any],
        ctx: dg.OpExecutionContext,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        opts: StepOptions,
        *,
        is_gen: bool,
    ) -> None:
        self.started = time.perf_counter()
        self.fn, self.ctx, self.args, self.kwargs = fn, ctx, args, kwargs
        self.opts, self.is_gen = opts, is_gen
        step_context = ctx.get_step_execution_context()
        self.step_key = step_context.step.key
        self.run_id = ctx.run.run_id
        self.tracked = TrackedStep.of(step_context)
        self.settings, self.plain_keys = _settings_for_outputs(ctx)
        default_policy = (
            self.settings.policy if self.settings is not None else CapturePolicy.capture
        )
        default_mode = self.settings.mode if self.settings is not None else LineageMode.contributing
        self.policy = CapturePolicy(opts.policy or default_policy)
        self.mode = LineageMode(opts.mode or default_mode)
        self.op_args = _op_args(ctx)
        self.all_outputs = [od.name for od in ctx.op_def.output_defs]
        #: filled by the step's first call: its output names and how to rebuild its result
        self.called = False
        self.out_names: list[str] = []
        self.rebuild: Callable[[list[Any]], Any] = list

    def run(self) -> Any:
        # progress lines of the capture (and of Spark work in user code) go to the run log
        with progress.report_to(self.ctx.log, about=self.step_key):
            try:
                return self._dispatch()
            except BaseException:
                self.tracked.discard()  # user code (or capture) failed: nothing is handed over
                raise

    def _dispatch(self) -> Any:
        if self.settings is None:
            self.ctx.log.warning(
                f"Step `{self.step_key}` is tracked, but its IO manager(s) {self.plain_keys} do "
                "not store lineage, so none is recorded. Use DSLogIOManager or "
                "with_lineage(...)."
            )
            return self.run_plain()
        if self.policy == CapturePolicy.off:
            result = self.run_plain()
            self.hand_over_untracked("off", 'policy="off": no lineage recorded.')
            return result
        defs = [d.name for d in self.ctx.op_def.input_defs if d.name in self.kwargs]
        names = [n for n in defs if n not in self.opts.untracked]
        if self.opts.lineage is not None:
            return self.run_declared(self.opts.lineage, names)
        if any(is_frame(self.kwargs[n]) for n in names):
            if self.policy == CapturePolicy.on_demand:
                shapes = self.frame_shapes(names)
                refs = tuple(_input_ref(self.ctx, n, self.run_id, self.step_key) for n in names)
                return self.run_on_demand(names, refs, shapes=shapes, engine="spark")
            return self.run_frames(names)
        if any(is_pandas_frame(self.kwargs[n]) for n in names):
            if self.policy == CapturePolicy.on_demand:
                self.check_pandas_inputs(names)
                refs = tuple(_input_ref(self.ctx, n, self.run_id, self.step_key) for n in names)
                return self.run_on_demand(names, refs)
            return self.run_pandas(names)
        if self.opts.characters:
            msg = (
                f"Step `{self.step_key}` asks for character lineage (`characters=True`), which "
                "is recorded for the string columns of Spark and pandas steps; its tracked "
                f"inputs {names} are not DataFrames. Drop `characters=True` for this step."
            )
            raise ConfigurationError(msg)
        for n in names:
            if not is_trackable(self.kwargs[n]):
                raise _reject(n, self.kwargs[n], self.step_key)
        refs = tuple(_input_ref(self.ctx, n, self.run_id, self.step_key) for n in names)
        if self.policy == CapturePolicy.on_demand and names:
            return self.run_on_demand(names, refs)
        if not names:
            result = self.run_plain()
            self.hand_over_untracked(
                "source", "No tracked inputs: registered as a source array version."
            )
            return result
        return self.run_arrays(names, refs, [n for n in defs if n in self.opts.untracked])

    # ------------------------------------------------------------ the user function

    def run_plain(self) -> Any:
        res = self.fn(*self.args, **self.kwargs)
        return plain_arrays(list(res) if self.is_gen else res)

    def run_plain_frames(self) -> Any:
        """:meth:`run_plain` for an on-demand Spark step, whose outputs must be DataFrames
        (an ``as_array`` output's rows would follow Spark's unstable order)."""
        from dslog_dagster.spark.steps import ArrayFromFrame

        res = self.fn(*self.args, **self.kwargs)
        vals = list(res) if isinstance(res, tuple) else [res]
        vals = [v.value if isinstance(v, dg.Output) else v for v in vals]
        if any(isinstance(v, ArrayFromFrame) for v in vals):
            msg = (
                f'Step `{self.step_key}` returns as_array(...) with policy="on_demand"; an '
                "on-demand Spark step returns DataFrames. Convert the frame in a captured "
                'step of its own (policy="capture"), or capture this step.'
            )
            raise ConfigurationError(msg)
        return plain_arrays(res)

    def frame_shapes(self, names: list[str]) -> tuple[tuple[int, ...], ...]:
        """The lineage shapes ``(rows, lineage columns)`` of an on-demand Spark step's
        inputs, from what the IO manager loaded (no Spark job when it knew the rows)."""
        from dslog_dagster.spark.fields import leaf_schema
        from dslog_dagster.spark.rowid import ROW_ID

        shapes = []
        for n in names:
            value = self.kwargs[n]
            if not is_frame(value):
                msg = (
                    f"Tracked step `{self.step_key}` mixes Spark DataFrame and "
                    f"`{type(value).__name__}` inputs (`{n}`); pass the other input in "
                    "`untracked_inputs`, or convert it in its own step."
                )
                raise UnsupportedArrayError(msg)
            src = self.tracked.take_frame_input(n)
            if src is None:
                msg = (
                    f"Input `{n}` of on-demand step `{self.step_key}` was not loaded by "
                    "DSLogIOManager, so its stored version cannot be re-read later; store the "
                    'upstream asset with DSLogIOManager, or use policy="capture".'
                )
                raise UnsupportedArrayError(msg)
            rows = src.rows if src.rows is not None else src.frame.count()
            fields = [f for f in src.frame.schema.fields if f.name != ROW_ID]
            shapes.append((int(rows), len(leaf_schema(fields))))
        return tuple(shapes)

    def call(self, tracked: dict[str, Any]) -> list[Any]:
        """Run the function with ``tracked`` inputs replaced; its output values."""
        kw = dict(self.kwargs)
        kw.update(tracked)
        res = self.fn(*self.args, **kw)
        vals, out_names, rebuild = _split_outputs(res, self.ctx, self.is_gen, self.step_key)
        # The first call is the step's own. Reuse re-runs it (verification, probes on
        # synthetic inputs) and a Spark capture rebuilds its plan only when the step is
        # declared pure: later runs must not replace the outputs' Output objects.
        if not self.called:
            self.called, self.out_names, self.rebuild = True, out_names, rebuild
        return vals

    # ------------------------------------------------------------ hand-over

    def op_name(self, output_name: str) -> str:
        return _op_identity(self.ctx, output_name, self.opts.op_code_version)[0]

    def pending(self, output_name: str, **fields: Any) -> PendingLineage:
        return PendingLineage(
            self.op_name(output_name), self.op_args, self.policy, self.mode,
            started=self.started, **fields,
        )  # fmt: skip

    def hand_over_untracked(self, obtained: str, status: str) -> None:
        for name in self.all_outputs:
            self.tracked.hand_over(name, self.pending(name, obtained=obtained, status=status))

    # ------------------------------------------------------------ on demand

    def run_on_demand(
        self,
        names: list[str],
        refs: tuple[InputRef, ...],
        *,
        shapes: tuple[tuple[int, ...], ...] | None = None,
        engine: str | None = None,
    ) -> Any:
        """policy="on_demand": the step runs unchanged; the IO manager registers its input and
        output versions with what re-running it needs (:mod:`dslog_dagster.core.on_demand`).
        ``engine``: who re-runs it (``"spark"``; ``None``: NumPy and pandas steps)."""
        others = [k for k in self.kwargs if k not in names]
        if (
            self.args
            or self.is_gen
            or any(not isinstance(self.kwargs[k], dg.Config) for k in others)
        ):
            msg = (
                f'Step `{self.step_key}` cannot use policy="on_demand": re-running it later '
                "needs a function of its tracked array inputs and its config alone (no "
                'context, untracked inputs or generator); use policy="capture" for it.'
            )
            raise ConfigurationError(msg)
        if self.opts.characters:
            msg = (
                f'Step `{self.step_key}` asks for character lineage with policy="on_demand"; '
                'character lineage is recorded by capture only: use policy="capture" for it.'
            )
            raise ConfigurationError(msg)
        result = self.run_plain() if engine is None else self.run_plain_frames()
        if shapes is None:
            shapes = tuple(tuple(int(d) for d in np.shape(self.kwargs[n])) for n in names)
        mode: CaptureModeName = (
            "considered" if self.mode == LineageMode.considered else "contributing"
        )
        try:
            info = deferred_args(
                self.fn,
                {r.name: r.arg for r in refs},
                mode,
                engine,
                self.reuse_key(),
                defer=self.opts.defer,
            )
        except Unsignable as e:
            msg = (
                f'Step `{self.step_key}` cannot use policy="on_demand": its code identity '
                f"cannot be computed (its function closes over a `{e}`), so a later re-run "
                "could not be checked against it. Define the step at module level, or use "
                'policy="capture" for it.'
            )
            raise ConfigurationError(msg) from e
        for name in self.all_outputs:
            pending = self.pending(
                name,
                inputs=refs,
                input_shapes=shapes,
                obtained="on_demand",
                capture_method=DEFERRED,
                status="Lineage on demand: captured when a query needs it.",
            )
            pending.op_args = {**pending.op_args, "on_demand": info}
            self.tracked.hand_over(name, pending)
        return result

    def reuse_key(self) -> dict[str, Any] | None:
        """How :meth:`run_arrays` keys this step's calls in the reuse registry (name, code
        version, keyword arguments), for an on-demand reconstruction to find its views."""
        if self.settings is None or not self.settings.reuse:
            return None
        first_op, code_version = _op_identity(
            self.ctx, self.all_outputs[0], self.opts.op_code_version
        )
        try:
            identity = f"{first_op}|{code_version}|{code_identity(self.fn)}"
        except Unsignable:
            return None
        return {"name": first_op, "code_version": identity, "args": {"op_args": self.op_args}}

    # ------------------------------------------------------------ NumPy steps

    def run_arrays(
        self, names: list[str], refs: tuple[InputRef, ...], untracked_args: list[str]
    ) -> Any:
        """A tracked step whose inputs are NumPy arrays: annotated, or served by reuse."""

        def call(*tracked: Any, **_signature_args: Any) -> tuple[Any, ...]:
            # `_signature_args` only key reuse views (see obtain_lineage); the step never sees them.
            return tuple(self.call(dict(zip(names, tracked, strict=True))))

        first_op, code_version = _op_identity(
            self.ctx, self.all_outputs[0], self.opts.op_code_version
        )
        # views record the function's name: name them after the step's asset (or op), so the
        # reuse-signature table says which step a view serves
        call.__qualname__ = call.__name__ = first_op
        call.__module__ = None  # type: ignore[assignment]
        registry, identity, sig_args, store = None, "", {}, None
        assert self.settings is not None
        if self.settings.reuse:
            try:
                identity = f"{first_op}|{code_version}|{code_identity(self.fn)}"
                untracked = {f"input:{n}": self.kwargs[n] for n in untracked_args}
                sig_args = {"op_args": self.op_args, **untracked}
                store = self.settings.store()
                registry = self.settings.registry(store=store)
            except Unsignable:
                registry = None  # a function whose code identity cannot be hashed is never reused
        result, seconds = obtain_lineage(
            call,
            [self.kwargs[n] for n in names],
            policy=self.policy,
            mode=self.mode,
            code_version=identity,
            signature_args=sig_args,
            reuse=registry,
            pure=self.opts.pure,
            defer=self.opts.defer,
        )
        if result is None:  # reuse_only without a confirmed view
            result_value = self.run_plain()
            self.hand_over_untracked(
                "none",
                'policy="reuse_only": no confirmed reuse view matched this call, so no lineage '
                "was recorded (the step ran unannotated).",
            )
            return result_value
        considered = self.mode == LineageMode.considered
        status = _reuse_status(result, registry, self.opts.pure)
        for k, out_name in enumerate(self.out_names):
            rels = tuple(lineage_of(result, k, i, considered=considered) for i in range(len(names)))
            pending = self.pending(
                out_name,
                inputs=refs,
                relations=rels,
                obtained=result.obtained,
                signature=result.signature,
                flagged=result.flagged,
                reason=result.reason,
                capture_s=seconds,
                annotation_bytes=result.annotation_bytes,
                store=store,
                status=status,
            )
            self.tracked.hand_over(out_name, pending)
        return self.rebuild(list(result.value))

    # ------------------------------------------------------------ declared lineage

    def run_declared(self, declared: DeclaredLineage, names: list[str]) -> Any:
        """A step that declares its lineage (``lineage=``): the function runs once on the
        plain inputs (no annotation), then the declaration is resolved against the real
        shapes and handed over like captured lineage (marked ``declared``)."""
        for n in names:
            value = self.kwargs[n]
            if not isinstance(value, np.ndarray) or value.dtype == object:
                msg = (
                    f"Input `{n}` of step `{self.step_key}` is {_what(value)}; declared lineage "
                    "(`lineage=`) names cells of NumPy arrays. Pass it in `untracked_inputs` "
                    "to use it as a parameter, or convert it to a NumPy array upstream."
                )
                raise UnsupportedArrayError(msg)
        refs = tuple(_input_ref(self.ctx, n, self.run_id, self.step_key) for n in names)
        values = self.call({})
        t0 = time.perf_counter()
        handed: list[tuple[str, tuple[LineageRelation | LineageTable, ...], list[str]]] = []
        for out_name, value in zip(self.out_names, values, strict=True):
            if not isinstance(value, np.ndarray):
                msg = (
                    f"Output `{out_name}` of step `{self.step_key}` is {_what(value)}; declared "
                    "lineage (`lineage=`) names cells of NumPy arrays, so the step must return "
                    'NumPy arrays (or use policy="off").'
                )
                raise UnsupportedArrayError(msg)
            rels: list[LineageRelation | LineageTable] = []
            without: list[str] = []
            for n in names:
                in_shape = self.kwargs[n].shape
                rel = declared.relation(
                    out_name, len(self.out_names), n, names, value.shape, in_shape
                )
                if rel is None:  # declared: no lineage from this input
                    without.append(n)
                    rel = LineageRelation.from_columns(
                        value.shape, in_shape, [[]] * value.ndim, [[]] * len(in_shape), n=0
                    )
                rels.append(rel)
            handed.append((out_name, tuple(rels), without))
        seconds = time.perf_counter() - t0
        for out_name, relations, without_lineage in handed:
            status = "Lineage declared by the step (`lineage=`), checked against the shapes."
            if without_lineage:
                status += f" Declared without lineage from {', '.join(without_lineage)}."
            pending = self.pending(
                out_name, inputs=refs, relations=relations, obtained="declared", capture_s=seconds,
                capture_method="declared", status=status,
            )  # fmt: skip
            self.tracked.hand_over(out_name, pending)
        return self.rebuild(list(values))

    # ------------------------------------------------------------ Spark steps

    def frame_inputs(self, names: list[str]) -> tuple[dict[str, Any], dict[str, int | None]]:
        """The tracked frames with their row ids (as the IO manager loaded them), by input."""
        from dslog_dagster.spark.rowid import ROW_ID

        frames: dict[str, Any] = {}
        rows: dict[str, int | None] = {}
        for n in names:
            value = self.kwargs[n]
            if not is_frame(value):
                msg = (
                    f"Tracked step `{self.step_key}` mixes Spark DataFrame and "
                    f"`{type(value).__name__}` inputs (`{n}`); a tracked step is either a Spark "
                    "step or a NumPy step. Convert the frame in its own step with "
                    "`as_array(frame, columns)`, or pass the other input in `untracked_inputs`."
                )
                raise UnsupportedArrayError(msg)
            src = self.tracked.take_frame_input(n)
            if src is not None:
                frames[n], rows[n] = src.frame, src.rows
            elif ROW_ID in value.columns:
                frames[n], rows[n] = value, None
            else:
                msg = (
                    f"Input `{n}` of tracked step `{self.step_key}` is a DataFrame stored "
                    "without row ids, so lineage has no rows to name. Store the upstream asset "
                    "with DSLogIOManager or with_lineage(<IO manager>) from a tracked step, "
                    'pass the input in `untracked_inputs`, or use policy="off".'
                )
                raise UnsupportedArrayError(msg)
        return frames, rows

    def run_frames(self, names: list[str]) -> Any:
        """A tracked step whose inputs are Spark DataFrames (:mod:`dslog_dagster.spark.steps`)."""
        from dslog_dagster.spark.steps import capture_step

        frames, rows = self.frame_inputs(names)
        refs = tuple(_input_ref(self.ctx, n, self.run_id, self.step_key) for n in names)
        if self.policy == CapturePolicy.reuse_only:
            result = self.run_plain()
            self.hand_over_untracked(
                "none",
                'policy="reuse_only": reuse views serve NumPy steps only, so this Spark step ran '
                'without capture and recorded no lineage (use policy="capture").',
            )
            return result
        outs = capture_step(
            lambda tracked: self.call(dict(tracked)),
            frames,
            rows,
            policy="all_to_all" if self.policy == CapturePolicy.all_to_all else "capture",
            considered=self.mode == LineageMode.considered,
            pure=self.opts.pure,
            characters=self.opts.characters,
        )
        for out, out_name in zip(outs, self.out_names, strict=True):
            cap = out.capture
            reason = None
            if cap.flagged:
                reason = (
                    f"No lineage rule for {', '.join(cap.flagged_ops)}: every output cell "
                    "depending on it is recorded as depending on every cell of its inputs "
                    "(over-approximation)."
                )
            pending = self.pending(
                out_name,
                inputs=refs,
                relations=tuple(out.tables[n] for n in names),
                obtained="captured",
                flagged=cap.flagged,
                reason=reason,
                capture_s=out.seconds,
                frame=None if out.is_array else cap,
                column_lineage=None if out.is_array else out.column_lineage,
                capture_method="spark-all-to-all" if cap.flagged else "spark",
                characters=None if out.is_array else cap.characters,
                effects=cap.effects,
            )
            self.tracked.hand_over(out_name, pending)
        return self.rebuild([o.value for o in outs])

    # ------------------------------------------------------------ pandas steps

    def check_pandas_inputs(self, names: list[str]) -> None:
        """Every tracked input of a pandas step is a DataFrame."""
        for n in names:
            if not is_pandas_frame(self.kwargs[n]):
                msg = (
                    f"Tracked step `{self.step_key}` mixes pandas DataFrame and "
                    f"`{type(self.kwargs[n]).__name__}` inputs (`{n}`); a tracked pandas step "
                    "takes DataFrames. Pass the other input in `untracked_inputs`, or convert "
                    "it in its own step."
                )
                raise UnsupportedArrayError(msg)

    def run_pandas(self, names: list[str]) -> Any:
        """A tracked step whose inputs are pandas DataFrames (:mod:`dslog_dagster.pandas`):
        the function runs once on tracked frames; each output frame's lineage names cells
        ``(row position, column position)`` of the inputs as loaded (rows in id order)."""
        from dslog_dagster.pandas.capture import capture_pandas

        self.check_pandas_inputs(names)
        if self.policy == CapturePolicy.reuse_only:
            result = self.run_plain()
            self.hand_over_untracked(
                "none",
                'policy="reuse_only": reuse views serve NumPy steps only, so this pandas step '
                'ran without capture and recorded no lineage (use policy="capture").',
            )
            return result
        # policy="all_to_all" captures like "capture": a pandas operation without a rule
        # fails the step (UnsupportedFrameOperationError names it) rather than being guessed
        refs = tuple(_input_ref(self.ctx, n, self.run_id, self.step_key) for n in names)
        caps = capture_pandas(
            self.fn,
            {n: self.kwargs[n] for n in names},
            call=lambda tracked: self.call(dict(zip(names, tracked, strict=True))),
            characters=self.opts.characters,
        )
        considered = self.mode == LineageMode.considered
        for cap, out_name in zip(caps, self.out_names, strict=True):
            reason = None
            if cap.flagged:
                reason = (
                    f"No cell-level rule for {', '.join(cap.flagged_ops)}: each result cell is "
                    "recorded as depending on every cell of its row (over-approximation)."
                )
            pending = self.pending(
                out_name,
                inputs=refs,
                relations=tuple(cap.table(n, considered=considered) for n in names),
                obtained="captured",
                flagged=cap.flagged,
                reason=reason,
                capture_s=cap.seconds,
                column_lineage=cap.column_lineage,
                contributing=tuple(cap.table(n) for n in names) if considered else None,
                capture_method="pandas-flagged" if cap.flagged else "pandas",
                characters=cap.characters,
                effects=cap.effects,
            )
            self.tracked.hand_over(out_name, pending)
        return self.rebuild([c.frame for c in caps])


# ------------------------------------------------------------------ step facts


def _reuse_status(result: CaptureResult, registry: ViewRegistry | None, pure: bool) -> str | None:
    """The status sentence (in ``dslog/record``) of a NumPy step run with a reuse registry:
    where the lineage came from, how the serving view was confirmed and checked, and whether
    the step is pure."""
    if registry is None:
        return None
    runs = (
        "declared pure: reuse may re-run it (probes on synthetic inputs, sampled verification)"
        if pure
        else "not declared pure: it ran once, and its views are confirmed from observed runs"
    )
    if result.obtained == "captured":
        demoted = ""
        if result.demoted:
            demoted = f" View(s) {', '.join(result.demoted)} disagreed and were demoted."
        return f"Lineage captured (annotated run). Step {runs}.{demoted}"
    try:
        info = registry.lookup(result.signature) if result.signature else None
    except ReuseError:  # a damaged view file: the status says less, the step goes on
        info = None
    view = info.describe() if info is not None else f"a {result.obtained} view"
    checked = " Verified on this call by a sampled re-run." if result.verified else ""
    return f"Lineage served from {view}.{checked} Step {runs}."


def _what(value: Any) -> str:
    """How a message names a value a step got or returned."""
    if isinstance(value, np.ndarray | np.generic):
        return f"a NumPy array of dtype `{np.asarray(value).dtype}`"
    if isinstance(value, dict):
        return "a dict (several partitions or a fan-in)"
    return f"a `{type(value).__module__}.{type(value).__name__}`"


def _reject(name: str, value: Any, step: str) -> UnsupportedArrayError:
    what = _what(value)
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
