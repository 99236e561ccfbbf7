"""A registration split in two: the operation written and flushed, not yet visible.

:meth:`LineageStore.prepare_operation <dslog_dagster.core.store.LineageStore.prepare_operation>`
returns a :class:`PreparedOperation`; a writer publishes it (:meth:`PreparedOperation.commit`)
only once its other work succeeded, so a failure in between leaves nothing visible. Kept apart
from the store so the store module stays one concept: this is the handle a writer holds
between the two halves.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dslog_dagster.core.store.failures import discard, storage_error
from dslog_dagster.core.store.records import ArrayRecord, OperationRecord
from dslog_dagster.errors import LineageStorageError

if TYPE_CHECKING:
    from concurrent.futures import Future


class Publisher(Protocol):
    """What a prepared operation needs of its store (a ``LineageStore``)."""

    root: Path

    def commit_prepared(
        self, prepared: "PreparedOperation", *, aside: bool = False
    ) -> OperationRecord: ...


@dataclass(eq=False)
class PreparedOperation:
    """An operation whose segment is written and flushed under the store's ``.staging/`` but
    not yet visible (:meth:`LineageStore.prepare_operation`). Call exactly one of
    :meth:`commit` and :meth:`abort`; an abandoned one (a crashed process) is a staging file
    that the store removes once it is an hour old.

    Attributes:
        record: the operation record :meth:`commit` stores (unless another writer registered
            one of its new outputs meanwhile: then it registers again and returns that).
    """

    store: "Publisher"
    tmp: Path
    rel: str
    record: OperationRecord
    new_outs: tuple[ArrayRecord, ...]
    retry: tuple[Any, ...]

    flush: "list[Future[None]] | None" = None

    def commit(self) -> OperationRecord:
        """Publish the operation: links, one rename, and (durable stores) the directories'
        fsync. Returns the stored record, durable when this returns.

        Raises:
            LineageStorageError: it could not be published (nothing of it is visible).
        """
        record = self.publish()
        self.flushed()
        return record

    def publish(self) -> OperationRecord:
        """Make the operation visible (links, one rename) and start flushing its directories
        in a worker thread (durable stores), so the caller can do other work meanwhile; call
        :meth:`flushed` before relying on durability (the IO manager builds the step's
        metadata in between). Returns the stored record.

        Raises:
            LineageStorageError: it could not be published (nothing of it is visible).
        """
        return self.store.commit_prepared(self, aside=True)

    def flushed(self) -> None:
        """Block until a :meth:`publish` is on disk (a no-op for stores that do not fsync).

        Raises:
            LineageStorageError: the directories could not be flushed.
        """
        flush, self.flush = self.flush, None
        if not flush:
            return
        try:
            for f in flush:
                f.result()
        except OSError as e:
            doing = f"flush operation `{self.record.op_id}`"
            raise storage_error(e, doing, self.store.root) from e
        except Exception as e:
            msg = f"Could not flush operation `{self.record.op_id}` in `{self.store.root}`: {e}"
            raise LineageStorageError(msg) from e

    def abort(self) -> None:
        """Drop the staged segment: the operation is never published. Never raises (it runs
        while another error propagates); a file it cannot remove is a stale staging file."""
        discard(self.tmp)
