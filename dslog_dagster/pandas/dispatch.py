"""pandas' module functions (``pd.concat``, ``pd.merge``, ``pd.get_dummies``) on tracked frames.

User code calls them on the frames it got, as it would on plain ones. pandas has no dispatch
protocol for its module functions, so the first pandas capture in a process wraps these three
with a function that hands tracked frames to dslog's rule and every other call to pandas'
own function unchanged (same arguments, same result). The wrappers are installed once and
never removed; code that imported the functions by name before (``from pandas import
concat``) calls pandas directly and fails on tracked frames with pandas' own error.
"""

import functools
import threading
from collections.abc import Callable
from typing import Any

import pandas as pd

from dslog_dagster.pandas.kinds import module_call

__all__ = ["install"]

_LOCK = threading.Lock()
_MARK = "__dslog_dispatch__"


def _tracked(v: Any) -> bool:
    from dslog_dagster.pandas.frame import TrackedDataFrame
    from dslog_dagster.pandas.series import TrackedSeries

    return isinstance(v, TrackedDataFrame | TrackedSeries)


def _wrap(original: Callable[..., Any], rule: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        first = args[0] if args else kwargs.get("objs", kwargs.get("data", kwargs.get("left")))
        items = list(first) if isinstance(first, list | tuple) else [first]
        if any(_tracked(v) for v in items) or any(_tracked(v) for v in args[1:2]):
            return rule(*args, **kwargs)
        return original(*args, **kwargs)

    setattr(dispatch, _MARK, original)
    return dispatch


def _merge(left: Any, right: Any, **kw: Any) -> Any:
    from dslog_dagster.pandas.combine import merge

    return merge(left, right, **kw)


def _concat(objs: Any, **kw: Any) -> Any:
    from dslog_dagster.pandas.combine import concat

    return concat(objs, **kw)


def _get_dummies(data: Any, **kw: Any) -> Any:
    from dslog_dagster.pandas.reshape import get_dummies

    return get_dummies(data, **kw)


def install() -> None:
    """Wrap ``pd.concat``, ``pd.merge`` and ``pd.get_dummies`` (once per process)."""
    with _LOCK:
        for name, rule in (("concat", _concat), ("merge", _merge), ("get_dummies", _get_dummies)):
            current = getattr(pd, name)
            if not hasattr(current, _MARK):
                setattr(pd, name, _wrap(current, module_call(name, rule)))
