"""Irrelevant arguments (thesis 5.2.4): arguments that do not change an operation's lineage.

When confirmed dim views at the same shapes differ in one argument only and have equal
lineage ``irrelevant_after`` times (and never differ), the argument is dropped from the
operation's keys; existing views are aliased under the shorter key and re-verified on first
use. One pair of views with different lineage marks the argument relevant for good (a
create-only marker, like a demotion).
"""

import contextlib
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from dslog_dagster.core.reuse.keys import Call, digest, dim_sig
from dslog_dagster.core.reuse.persistence import View, ViewFiles
from dslog_dagster.core.reuse.views import table_sets_equal

__all__ = ["ArgumentRelevance"]


class ArgumentRelevance:
    """Which arguments of each operation are irrelevant, learnt from confirmed dim views.

    Args:
        files: the registry's view files (the state lives beside the views).
        irrelevant_after: equal-lineage pairs that make an argument irrelevant (0: never).
    """

    def __init__(self, files: ViewFiles, irrelevant_after: int) -> None:
        self.files = files
        self.irrelevant_after = irrelevant_after
        #: Bumped whenever an argument changes relevance (cached served calls are then stale).
        self.version = 0
        self._state: dict[str, dict[str, Any]] = {}

    def _args(self, code: str, mode: str) -> dict[str, Any]:
        key = code + "|" + mode
        st = self._state.get(key)
        if st is None:
            st = self.files.read_args(code, mode)
            if st is None:
                st = {"evidence": {}, "irrelevant": []}
            self._state[key] = st
        return st

    def drop(self, code: str, mode: str) -> frozenset[str]:
        """The irrelevant arguments of an operation (left out of its keys)."""
        return frozenset(self._args(code, mode).get("irrelevant", []))

    def note_confirmed_dim(self, call: Call, v: View) -> None:
        """Irrelevant-argument detection over confirmed dim views at the same shapes."""
        if self.irrelevant_after <= 0 or not v.arg_tokens:
            return
        st = self._args(call.code, call.mode)
        changed = False
        for other_sig in list(self.files.groups.get(v.group, [])):
            w = self.files.views.get(other_sig)
            if w is None or w is v or w.status != "confirmed" or self.files.is_dead(other_sig):
                continue
            if set(w.arg_tokens) != set(v.arg_tokens):
                continue
            diff = [k for k in v.arg_tokens if v.arg_tokens[k] != w.arg_tokens[k]]
            if len(diff) != 1:
                continue
            name = diff[0]
            marker = self.files.relevant_marker(call.code, call.mode, name)
            if table_sets_equal(v.tables, w.tables) and v.out_shapes == w.out_shapes:
                if not marker.exists():
                    st["evidence"][name] = int(st["evidence"].get(name, 0)) + 1
                    changed = True
            else:
                with contextlib.suppress(FileExistsError):
                    marker.open("x").close()
                if name in st["irrelevant"]:
                    st["irrelevant"].remove(name)
                changed = True
        for name, n in list(st["evidence"].items()):
            if (
                n >= self.irrelevant_after
                and name not in st["irrelevant"]
                and not self.files.relevant_marker(call.code, call.mode, name).exists()
            ):
                st["irrelevant"].append(name)
                changed = True
                self._alias_group(call, frozenset(st["irrelevant"]))
        if changed:
            self.version += 1
            self.files.write_args(call.code, call.mode, st)

    def _alias_group(self, call: Call, drop: frozenset[str]) -> None:
        """Re-key this operation's confirmed dim views without the irrelevant arguments."""
        owner = digest(call.code, call.mode)
        files = self.files
        for group in list(files.groups.values()):
            for sig in list(group):
                v = files.views.get(sig)
                if v is None or v.owner != owner or v.status != "confirmed" or not v.arg_tokens:
                    continue
                tok = (
                    "{"
                    + ",".join(
                        f"{k}={v.arg_tokens[k]}" for k in sorted(v.arg_tokens) if k not in drop
                    )
                    + "}"
                )
                alias = dim_sig(call.code, call.mode, tok, v.in_shapes)
                if alias == sig or files.get(alias) is not None or files.is_dead(alias):
                    continue
                a = replace(
                    v,
                    signature=alias,
                    hits=0,
                    verified=[],
                    created=time.time(),
                    instances=OrderedDict(),
                    unflushed=0,
                )
                files.views[alias] = a
                files.save(a)
