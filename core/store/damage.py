"""The damaged files a store handle has met, so that damage is isolated and never silent.

A damaged file (a checksum mismatch, bytes that do not parse) must not take the rest of the
store down with it, nor disappear from view: listings skip what is damaged and list the rest,
and every file skipped is noted here, said in a
:class:`~dslog_dagster.errors.DamagedStoreWarning` naming it, and returned by
``LineageStore.damaged()``. Files of formats before checksums are noted as unverified.
"""

import threading
import warnings
from dataclasses import dataclass, field

from dslog_dagster.errors import DamagedStoreWarning


@dataclass
class DamageLog:
    """Damaged and unverified files met by one store handle (root-relative POSIX paths).

    Attributes:
        damaged: path -> what is wrong with it (the error message).
        damaged_ops: path -> operation ids known to be in it (for a pack whose rows are
            partly damaged: the damaged rows only).
        unverified: files read without checksums (written before format ``2-2``).
    """

    damaged: dict[str, str] = field(default_factory=dict)
    damaged_ops: dict[str, set[str]] = field(default_factory=dict)
    unverified: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def note(self, rel: str, reason: str, op_id: str | None = None) -> None:
        """Note that file ``rel`` is damaged (``op_id``: the operation it held, if known)."""
        with self._lock:
            self.damaged[rel] = reason
            if op_id is not None:
                self.damaged_ops.setdefault(rel, set()).add(op_id)

    def clear(self, rel: str) -> None:
        """Forget ``rel`` (it was moved aside, or it vanished)."""
        with self._lock:
            self.damaged.pop(rel, None)
            self.damaged_ops.pop(rel, None)
            self.unverified.discard(rel)

    def warn(self, rels: list[str], where: str) -> None:
        """Say that a listing of the store at ``where`` skipped the damaged files ``rels``."""
        if not rels:
            return
        names = ", ".join(f"`{r}`" for r in sorted(rels))
        msg = (
            f"The lineage store at `{where}` has damaged files, skipped: {names}. Everything "
            "else is listed. Run `dslog fsck STORE` to check every file and `dslog fsck STORE "
            "--quarantine` to move the damaged ones aside."
        )
        warnings.warn(msg, DamagedStoreWarning, stacklevel=3)
