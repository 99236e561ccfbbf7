"""Sending a materialization's OpenLineage events through the configured transport.

Lineage for other systems is a courtesy to them, not part of the materialization: a transport
that fails (server down, file not writable, the extra not installed) logs a warning that says
what to fix and is counted in the step's ``dslog/openlineage`` metadata; the materialization
and its stored lineage stand. The transports are the ``openlineage-python`` client's own
(``FileTransport`` appending one JSON line per event, ``HttpTransport``), one per configuration
and process.
"""

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dslog_dagster.extras import require
from dslog_dagster.settings import OpenLineageSettings

__all__ = ["EmitReport", "emit", "transport_for"]

FEATURE = "OpenLineage events (DSLogResource openlineage.transport)"
_transports: dict[str, Any] = {}
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class EmitReport:
    """How one materialization's events went: sent, failed, and the first failure."""

    sent: int
    failed: int
    error: str | None = None

    def text(self) -> str:
        """``dslog/openlineage``: ``2 events sent`` / ``0 of 2 events sent: <error>``."""
        if not self.failed:
            return f"{self.sent} events sent"
        return f"{self.sent} of {self.sent + self.failed} events sent: {self.error}"


def transport_for(cfg: OpenLineageSettings) -> Any:
    """The client transport of a configuration (made once per process and configuration).

    Raises:
        MissingExtraError: ``openlineage-python`` is not installed.
    """
    key = cfg.model_dump_json()
    with _lock:
        t = _transports.get(key)
        if t is not None:
            return t
        if cfg.transport == "file":
            f = require("openlineage.client.transport.file", FEATURE)
            t = f.FileTransport(f.FileConfig(log_file_path=str(cfg.path), append=True))
        else:
            h = require("openlineage.client.transport.http", FEATURE)
            params: dict[str, Any] = {
                "url": cfg.url,
                "endpoint": cfg.endpoint,
                "timeout": cfg.timeout,
                # one retry: a down server must not hold the step for the client's backoff
                "retry": {"total": 1, "connect": 1, "read": 1, "backoff_factor": 0.1},
            }
            if cfg.api_key:
                params["auth"] = {"type": "api_key", "apiKey": cfg.api_key}
            t = h.HttpTransport(h.HttpConfig.from_dict(params))
        _transports[key] = t
        return t


def _where(cfg: OpenLineageSettings) -> str:
    return f"file {cfg.path}" if cfg.transport == "file" else f"{cfg.url}/{cfg.endpoint}"


def emit(
    cfg: OpenLineageSettings,
    events: Callable[[], Sequence[Any]],
    warn: Callable[[str], None],
    what: str,
) -> EmitReport | None:
    """Build ``events`` and send them; ``None`` when the transport is off. Never raises for
    a failure of the export: it is logged with ``warn`` and reported."""
    if cfg.transport == "off":
        return None
    try:
        built = list(events())
        transport = transport_for(cfg)
    except Exception as e:
        warn(
            f"OpenLineage events of {what} were not built ({type(e).__name__}: {e}). The "
            "materialization and its lineage are stored; install the [openlineage] extra or "
            "fix the resource's openlineage settings to send them."
        )
        return EmitReport(0, 2, f"{type(e).__name__}: {e}")
    sent, failed, first = 0, 0, None
    for ev in built:
        try:
            transport.emit(ev)
            sent += 1
        except Exception as e:
            failed += 1
            first = first or f"{type(e).__name__}: {e}"
    if failed:
        warn(
            f"{failed} of {len(built)} OpenLineage events of {what} were not sent to "
            f"{_where(cfg)} ({first}). The materialization and its lineage are stored; check "
            "that the server runs and the resource's openlineage settings (url, endpoint, "
            "api_key, path), or set openlineage.transport=off. `dslog export openlineage` "
            "writes the events again from the store."
        )
    return EmitReport(sent, failed, first)
