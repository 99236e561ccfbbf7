"""Where the frame and series facades find the rules that live in other modules.

``TrackedDataFrame.merge`` needs :mod:`~dslog_dagster.pandas.combine`, which needs
``TrackedDataFrame``; a series' ``to_frame`` needs the frame class. Importing each other would
be a cycle, so those modules register their entry points here when imported
(:mod:`dslog_dagster.pandas.capture` imports them all) and the facades look them up by name.
"""

from collections.abc import Callable
from typing import Any

from dslog_dagster.errors import UnsupportedFrameOperationError

__all__ = ["register", "rule"]

_RULES: dict[str, Callable[..., Any]] = {}


def register(name: str, fn: Callable[..., Any]) -> None:
    """Make ``fn`` the rule named ``name``."""
    _RULES[name] = fn


def rule(name: str) -> Callable[..., Any]:
    """The rule named ``name``.

    Raises:
        UnsupportedFrameOperationError: its module was never imported (use the capture entry
            points, which import every rule).
    """
    try:
        return _RULES[name]
    except KeyError:
        msg = (
            f"The pandas rule `{name}` is not loaded; capture through "
            "`dslog_dagster.pandas.capture_pandas` (or `capture(fn, df)`), which loads them."
        )
        raise UnsupportedFrameOperationError(msg) from None
