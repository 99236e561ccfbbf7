"""What an operating-system failure of the store means, said once for every writer.

A full disk, a read-only mount and a folder the user may not write all reach Python as
``OSError`` with an errno; DuckDB reports the same causes as text. Every write path of the
store (array records, operation segments, packs, the store id, the catalog) turns them into
one of the classes of :mod:`dslog_dagster.errors` through :func:`storage_error`, so a user
gets the same diagnosis and the same advice whichever file hit the problem, and never a
misleading one (a full disk reported as a lock, or as damage).

Cleanup after a failure goes through :func:`discard`: removing a temporary file can fail for
the very reason the write failed (``unlink`` on a read-only mount is ``EROFS`` even for a file
that was never created), and that second failure must never replace the first.
"""

import errno
import logging
import os
from pathlib import Path

from dslog_dagster.errors import (
    LineageStorageError,
    StoreFullError,
    StorePermissionError,
    StoreReadOnlyError,
)

logger = logging.getLogger(__name__)

_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_DENIED = frozenset({errno.EACCES, errno.EPERM})

# DuckDB reports OS failures as text ("... : No space left on device"): the causes we map.
_TEXT_ERRNO = (
    ("no space left", errno.ENOSPC),
    ("disk quota exceeded", errno.EDQUOT),
    ("read-only file system", errno.EROFS),
    ("permission denied", errno.EACCES),
    ("operation not permitted", errno.EPERM),
)


def errno_of_text(text: str) -> int | None:
    """The errno an error message (DuckDB's, say) reports, when it names one we map."""
    low = text.lower()
    for words, code in _TEXT_ERRNO:
        if words in low:
            return code
    return None


def _writable(folder: Path) -> bool:
    """Whether ``folder`` may be written: this user has write access and its mode is not
    read-only for everyone (``chmod a-w``, which the superuser's access ignores)."""
    try:
        return os.access(folder, os.W_OK) and bool(os.stat(folder).st_mode & 0o222)
    except (OSError, ValueError):
        return True


def storage_error(
    e: OSError | int | None,
    doing: str,
    root: str | os.PathLike[str],
    *,
    detail: str = "",
    path: str | os.PathLike[str] | None = None,
) -> LineageStorageError:
    """The :mod:`dslog_dagster.errors` error for failure ``e`` (an ``OSError`` or an errno)
    while the store at ``root`` was ``doing`` something ("write operation `x`").

    The message says what happened, that nothing half-written is visible, and what to do. The
    returned error carries the errno of ``e`` (``err.errno``; its file is named in the
    message: setting ``filename`` would make ``str(err)`` OSError's terse form), so code
    catching ``OSError`` can still look at it. Raise it ``from e``. ``path`` names the file
    when ``e`` is an errno (read from a message); ``detail`` replaces its reason.
    """
    code = e.errno if isinstance(e, OSError) else e
    filename = e.filename if isinstance(e, OSError) else path
    if filename is not None:
        filename = os.fsdecode(filename)
    reason = detail or (f"{e.strerror or e}" if isinstance(e, OSError) else "")
    where = f"`{filename}`" if filename else "a file of the store"
    head = f"Could not {doing} in the lineage store at `{root}`"
    cls: type[LineageStorageError]
    if code in _FULL:
        cls = StoreFullError
        msg = (
            f"{head}: the disk holding it is full ({reason}). Nothing half-written was left "
            "visible and what the store held is intact. Free space on that file system (or "
            "move the store), then run again."
        )
    elif code == errno.EROFS or (
        code in _DENIED and filename is not None and not _writable(Path(filename).parent)
    ):
        cls = StoreReadOnlyError
        folder = f"`{Path(filename).parent}`" if code != errno.EROFS and filename else "it"
        msg = (
            f"{head}: {folder} is read-only ({reason}). Nothing was changed; reading the store "
            "still works. Remount it read-write or give the user running dslog write access "
            "(or point `DSLogResource(store_dir=...)` at a writable folder), then run again."
        )
    elif code in _DENIED:
        cls = StorePermissionError
        msg = (
            f"{head}: the system refused access to {where} ({reason}). Nothing was changed. "
            "Give the user running dslog read and write access to the store folder and "
            "everything in it (e.g. `chown -R`), then run again."
        )
    elif code == errno.ENOTDIR:
        cls = LineageStorageError
        msg = (
            f"{head}: part of the path {where} is a file, not a folder ({reason}). Nothing was "
            "changed. Point the store (`DSLogResource(store_dir=...)`, `LineageStore(path)`) "
            "at a folder, or move that file away, then run again."
        )
    else:
        cls = LineageStorageError
        msg = f"{head}: {reason or e}. Nothing half-written was left visible."
    err = cls(msg)
    err.errno = code
    return err


def discard(path: Path) -> None:
    """Remove temporary file ``path`` if it is there, never raising: a cleanup that fails
    (the file system turned read-only, say) must not hide the error being cleaned up after;
    what it leaves is removed later as a stale temporary file."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        logger.debug("could not remove temporary file %s: %s", path, e)
