"""Progress of long lineage work in the run log: phases, heartbeats, and what a step waits for.

A tracked step used to be silent between Dagster's "started" and "succeeded": a Spark step
that spent two minutes starting its JVM looked exactly like one that hung. This module gives
the work a voice without spamming the log:

* a :func:`phase` (annotated run, extraction, compression, write, a Spark capture) logs **one
  line when it ends**, with its duration and sizes (``extraction of `b`: 3 tables, 12,288
  pairs in 0.041 s``). A phase marked ``quiet`` (the write of a step served from a reuse
  view, whose budget is a few milliseconds) logs its end only when it ran long;
* while a phase runs longer than :func:`interval` seconds (5 by default,
  ``DSLOG_PROGRESS_INTERVAL``), one shared daemon thread logs a heartbeat for it, **at most
  one line per interval per phase**, with what the registered probes report (Spark's status
  tracker: jobs, stages and tasks done; see :mod:`dslog_dagster.spark.progress`);
* :func:`waiting` marks a wait (the catalog lock, the Spark session starting): silent when
  short, a heartbeat while long, and one line saying how long it waited.

Where the lines go is a context variable: the Dagster glue sets it to the step's
``context.log`` for the step (:func:`report_to`), so lines land in the run log; unset, they go
to the ``dslog_dagster`` logger (Python ``logging``). A phase keeps the destination of the
thread that opened it, so work handed to a worker thread (the lineage write) still reports to
its step. This module imports neither Dagster nor Spark (core never does).
"""

import contextlib
import contextvars
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

__all__ = [
    "Phase",
    "Sink",
    "add_probe",
    "current_sink",
    "fmt_bytes",
    "fmt_count",
    "fmt_seconds",
    "interval",
    "phase",
    "remove_probe",
    "report_to",
    "silenced",
    "subject",
    "waiting",
]

LOGGER = logging.getLogger("dslog_dagster")
"""Where lines go outside a Dagster step."""

QUIET_MIN_S = 1.0
"""A ``quiet`` phase or a wait logs its end only when it took at least this long."""


class Sink(Protocol):
    """What lines are written to: ``logging.Logger`` and Dagster's ``DagsterLogManager`` both
    fit."""

    def info(self, msg: str, *args: Any, **kwargs: Any) -> Any: ...


_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("dslog_progress", default=None)
_subject: contextvars.ContextVar[str | None] = contextvars.ContextVar("dslog_about", default=None)


def interval() -> float:
    """Seconds between heartbeats of one phase (``DSLOG_PROGRESS_INTERVAL``, default 5)."""
    raw = os.environ.get("DSLOG_PROGRESS_INTERVAL", "")
    try:
        value = float(raw) if raw else 5.0
    except ValueError:
        value = 5.0
    return max(0.05, value)


def current_sink() -> Sink:
    """The destination of this thread's lines: the step's log, else :data:`LOGGER`."""
    sink = _sink.get()
    return LOGGER if sink is None else sink


def subject(default: str) -> str:
    """What phase lines call the work being captured: the step set by :func:`report_to`,
    else ``default`` (the captured function's name)."""
    return _subject.get() or default


@contextlib.contextmanager
def report_to(sink: Sink | None, about: str | None = None) -> Iterator[None]:
    """Send the lines of phases opened in this context to ``sink`` (a step's ``context.log``);
    ``about`` names the work in them (a step key, rather than its wrapper function's name)."""
    token = _sink.set(sink)
    named = _subject.set(about) if about is not None else None
    try:
        yield
    finally:
        if named is not None:
            _subject.reset(named)
        _sink.reset(token)


class _Silent:
    """A sink that drops every line (see :func:`silenced`)."""

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        return None


def silenced() -> contextlib.AbstractContextManager[None]:
    """Drop the lines of phases opened in this context: helper work that would repeat the
    step's own lines many times (reuse probes on synthetic inputs)."""
    return report_to(_Silent())


# ------------------------------------------------------------------ number formatting


def fmt_seconds(s: float) -> str:
    """``0.3 ms``, ``41 ms``, ``1.3 s``, ``73 s``: two significant digits (whole seconds from
    ten seconds on)."""
    if s < 0.0001:
        return "<0.1 ms"
    if s < 0.1:
        return f"{float(f'{s * 1000:.2g}'):g} ms"
    if s < 10:
        return f"{float(f'{s:.2g}'):g} s"
    return f"{s:.0f} s"


def fmt_bytes(n: int) -> str:
    """``812 B``, ``4.2 KB``, ``1.3 MB``, ``2.0 GB`` (powers of 1000)."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError  # pragma: no cover - the loop returns at GB


def fmt_count(n: int) -> str:
    """``12,288``: thousands separated."""
    return f"{int(n):,}"


# ------------------------------------------------------------------ probes (Spark progress)

_probes: dict[int, Callable[[], str | None]] = {}
_probe_ids = itertools.count()
_probes_lock = threading.Lock()


def add_probe(probe: Callable[[], str | None]) -> int:
    """Register ``probe``: called by the heartbeat thread, what it returns (``None``: nothing
    to say) is appended to heartbeat lines. Returns the id for :func:`remove_probe`."""
    with _probes_lock:
        pid = next(_probe_ids)
        _probes[pid] = probe
        return pid


def remove_probe(pid: int) -> None:
    """Unregister the probe :func:`add_probe` returned ``pid`` for."""
    with _probes_lock:
        _probes.pop(pid, None)


def _probe_text() -> str:
    with _probes_lock:
        probes = list(_probes.values())
    parts = []
    for probe in probes:
        try:
            text = probe()
        except Exception as e:  # a probe never breaks the step it reports on
            LOGGER.debug("progress probe failed: %s", e)
            continue
        if text:
            parts.append(text)
    return "; ".join(parts)


# ------------------------------------------------------------------ phases


class Phase:
    """One running piece of work; see :func:`phase`. ``sizes`` may be extended while it runs
    (:meth:`note`), and the end line reports them."""

    def __init__(
        self, label: str, sink: Sink, *, quiet: bool, wait: bool, wake: bool = True
    ) -> None:
        self.label = label
        self.sink = sink
        self.quiet = quiet
        self.wait = wait
        self.wake = wake
        self.started = time.monotonic()
        self.last_line = self.started
        self.details: list[str] = []

    def note(self, *details: str) -> None:
        """Add size details (``"3 tables"``) to the line the phase ends with."""
        self.details.extend(d for d in details if d)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def emit(self, text: str) -> None:
        try:
            self.sink.info(f"dslog: {text}")
        except Exception as e:  # a closed log (a run that ended) must not fail the work
            LOGGER.debug("progress line dropped (%s): %s", e, text)

    def heartbeat(self, now: float) -> None:
        so_far = fmt_seconds(now - self.started)
        extra = _probe_text()
        what = f"waiting for {self.label}" if self.wait else f"still {self.label}"
        self.emit(f"{what} ({so_far} so far{'; ' + extra if extra else ''})")
        self.last_line = now

    def end(self, failed: bool) -> None:
        took = self.elapsed()
        if failed:
            if took >= QUIET_MIN_S:
                what = f"gave up waiting for {self.label}" if self.wait else self.label
                self.emit(f"{what}: stopped by an error after {fmt_seconds(took)}")
            return
        if (self.quiet or self.wait) and took < QUIET_MIN_S:
            return
        if self.wait:
            self.emit(f"waited {fmt_seconds(took)} for {self.label}")
            return
        sizes = f": {', '.join(self.details)}" if self.details else ""
        self.emit(f"{self.label}{sizes} in {fmt_seconds(took)}")


class _Heartbeat:
    """The one daemon thread that logs heartbeats of long phases (started on first use).

    A phase that is expected to be short (``quiet``: a served step's write; ``wake=False``: a
    capture's annotated run and extraction, milliseconds for most arrays) is added without
    waking the thread: waking it costs a thread switch, and on a loaded machine the woken
    thread holding the GIL cost a capture of 10^6 cells a third of its time. Such a phase
    normally ends long before its first heartbeat is due. The thread never sleeps longer than
    a second (or the interval, when shorter), so a phase added unwoken that does run long
    still gets its heartbeats, at most that much late. Other phases and waits (whose
    heartbeats say what a step is waiting for) wake it.
    """

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.active: dict[int, Phase] = {}
        self.ids = itertools.count()
        self.thread: threading.Thread | None = None
        self.pid = -1
        #: how many times :meth:`add` woke the thread (tests)
        self.wakeups = 0

    def add(self, ph: Phase) -> int:
        with self.lock:
            key = next(self.ids)
            self.active[key] = ph
            if self.thread is None or self.pid != os.getpid() or not self.thread.is_alive():
                # a forked child (multiprocess executor) has no thread of its parent
                self.pid = os.getpid()
                self.thread = threading.Thread(
                    target=self._loop, name="dslog-progress", daemon=True
                )
                self.thread.start()
            elif ph.wait or (ph.wake and not ph.quiet):
                self.lock.notify()
                self.wakeups += 1
            return key

    def remove(self, key: int) -> None:
        with self.lock:
            self.active.pop(key, None)

    def _loop(self) -> None:
        while True:
            every = interval()
            with self.lock:
                # at most a second asleep, so a quiet phase added without a wake-up keeps pace
                self.lock.wait(timeout=min(every, 1.0))
                now = time.monotonic()
                due = [p for p in self.active.values() if now - p.last_line >= every]
            for ph in due:  # outside the lock: a probe may call into the JVM
                ph.heartbeat(now)


_HEARTBEAT = _Heartbeat()


@contextlib.contextmanager
def phase(
    label: str,
    *details: str,
    quiet: bool = False,
    wake: bool = True,
    sink: Sink | None = None,
) -> Iterator[Phase]:
    """Run the body as the phase ``label``: one line when it ends (duration and ``details``,
    more added with :meth:`Phase.note`), heartbeats while it runs long.

    Args:
        label: what runs, as the line should say it (``"extraction of `b`"``).
        *details: sizes known at the start (``"2 inputs, 8.4 MB"``).
        quiet: log the end only when the phase took at least :data:`QUIET_MIN_S` (work whose
            budget is milliseconds, such as a served step's write).
        wake: wake the heartbeat thread when the phase starts. ``False`` for work that is
            usually short but whose end line is still wanted (a capture's phases): no thread
            switch, and a long run gets its first heartbeat at most a second late.
        sink: where the lines go; default: this thread's (:func:`current_sink`).
    """
    ph = Phase(label, sink or current_sink(), quiet=quiet, wait=False, wake=wake)
    ph.note(*details)
    with _running(ph):
        yield ph


@contextlib.contextmanager
def waiting(what: str, sink: Sink | None = None) -> Iterator[Phase]:
    """Mark a wait for ``what`` (``"the catalog lock"``): silent when shorter than
    :data:`QUIET_MIN_S`, else heartbeats while it lasts and one line with how long it took."""
    ph = Phase(what, sink or current_sink(), quiet=True, wait=True)
    with _running(ph):
        yield ph


@contextlib.contextmanager
def _running(ph: Phase) -> Iterator[None]:
    """Heartbeats for ``ph`` while the body runs, then its end line (saying whether it failed)."""
    key = _HEARTBEAT.add(ph)
    failed = True
    try:
        yield
        failed = False
    finally:
        _HEARTBEAT.remove(key)
        ph.end(failed)
