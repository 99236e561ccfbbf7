"""``DSLogResource``: where the lineage store lives and how tracked steps capture lineage.

Where the store lives (first that applies) — one rule for the IO managers, the query assets
and the checks, so a deployment has one store:

1. ``store_dir`` when set;
2. the ``DSLOG_STORE`` environment variable (the same default as the core's module-level API);
3. ``<instance storage directory>/.dslog`` (``$DAGSTER_HOME/storage/.dslog``).

An IO manager's ``base_dir`` places asset values only, never the lineage.
"""

import os
import threading
from pathlib import Path

import dagster as dg
from pydantic import Field

from dslog_dagster.core.api import DSLog
from dslog_dagster.core.query import QueryEngine
from dslog_dagster.core.reuse import ReusePolicy, ViewRegistry
from dslog_dagster.core.store import LineageStore, read_store_id
from dslog_dagster.core.store.object_backends import is_url
from dslog_dagster.settings import TrackingSettings

__all__ = ["DSLogResource", "flush_stores", "open_store"]

_stores: dict[tuple[Path | str, bool, bool], LineageStore] = {}
_sessions: dict[Path, DSLog] = {}
# (root, policy) -> (store id, registry): shared by every handle of one store (durable or
# not), renewed when the directory is another store (deleted and made again)
_registries: dict[tuple[Path, ReusePolicy], tuple[str, ViewRegistry]] = {}
_stores_lock = threading.Lock()


def open_store(
    root: str | os.PathLike[str], *, durable: bool = True, group_commit: bool = False
) -> LineageStore:
    """The process-wide :class:`LineageStore` for ``root`` (one catalog handle per process).

    ``durable`` and ``group_commit`` select whether and when its writes fsync (see
    :class:`LineageStore`); a store opened several ways is several handles on the same files.
    """
    path = located(root)
    key = (path, durable, group_commit)
    with _stores_lock:
        store = _stores.get(key)
        # (a store on object storage keeps its id: its cache is keyed by it)
        if store is None or (isinstance(path, Path) and read_store_id(path) != store.store_id):
            # new, or the directory was deleted (and maybe made again) since: a handle on the
            # old one would serve its cached records and views for files that are gone
            if store is not None:
                store.flush()  # what the old handle published, before it is dropped
            store = LineageStore(path, durable=durable, group_commit=group_commit)
            _stores[key] = store
        return store


def located(where: str | os.PathLike[str]) -> Path | str:
    """A store URL (``s3://bucket/prefix``) as given; a path made absolute."""
    return str(where) if is_url(str(where)) else Path(where).absolute()


def flush_stores() -> None:
    """Flush the group-committed writes of every store handle of this process (a run's end).

    Raises:
        LineageStorageError: a flush failed (what to do is in the message).
    """
    with _stores_lock:
        stores = [s for s in _stores.values() if s.group_commit]
    for store in stores:
        store.flush()


class DSLogResource(dg.ConfigurableResource, TrackingSettings):  # type: ignore[type-arg]
    """Lineage settings shared by the tracked decorators, the IO managers and query assets,
    and the one lineage store of the deployment.

    The tracking fields are those of TrackingSettings; this resource adds the query engine and
    the handles on the store (store, reuse registry, query session). Pass the same object to
    the IO manager (DSLogIOManager(dslog=dslog)) and bind it under "dslog", so lineage is
    written where the query assets and checks read it. (Plain text: Dagster shows this
    docstring in the launchpad.)

    Examples:
        >>> import dagster as dg
        >>> from dslog_dagster import DSLogIOManager
        >>> dslog = DSLogResource(policy="capture")
        >>> resources = {"io_manager": DSLogIOManager(dslog=dslog, base_dir="data"),
        ...              "dslog": dslog}
        >>> defs = dg.Definitions(assets=[], resources=resources)
    """

    query_engine: QueryEngine = Field(
        default="native",
        description=(
            "Engine of the query assets: native (in-situ C++ on this machine) or spark (range "
            "joins in Spark SQL over the stored tables, for stores too big for one machine; "
            "uses the running SparkSession, else starts a local one)."
        ),
    )

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        flush_stores()  # the run's group-committed lineage on disk before the run ends

    def resolve_store_dir(self, default_base: str | os.PathLike[str] | None = None) -> Path | str:
        """The store directory (or URL) by the rule in the module docstring."""
        if self.store_dir:
            return located(self.store_dir)
        env = os.environ.get("DSLOG_STORE")
        if env:
            return located(env)
        base = Path(default_base) if default_base is not None else Path.cwd()
        return (base / ".dslog").absolute()

    def store(self, default_base: str | os.PathLike[str] | None = None) -> LineageStore:
        """The lineage store (opened once per process and directory)."""
        return open_store(
            self.resolve_store_dir(default_base),
            durable=self.durable,
            group_commit=self.group_commit,
        )

    def registry(
        self,
        default_base: str | os.PathLike[str] | None = None,
        *,
        store: LineageStore | None = None,
    ) -> "ViewRegistry":
        """The process-wide reuse-view registry of the store (one per store directory).

        ``store``: the handle :meth:`store` just returned, when the caller has it (opening
        checks the store's id file, a noticeable part of a step served from a view).
        """
        if store is None:
            store = self.store(default_base)
        policy = ReusePolicy(confirm_after=self.confirm_after, rate=self.verify_rate)
        with _stores_lock:
            held = _registries.get((store.root, policy))
            # A recreated store (another id) learns afresh; the durable and non-durable
            # handles of one store share its registry (views are the store's, not a handle's:
            # alternating handles used to rebuild the registry, and its caches, on every run).
            if held is None or held[0] != store.store_id:
                registry = ViewRegistry(store, policy)
                held = _registries[(store.root, policy)] = (store.store_id, registry)
            return held[1]

    def session(self, default_base: str | os.PathLike[str] | None = None) -> DSLog:
        """The process-wide :class:`~dslog_dagster.core.api.DSLog` session over the store.

        Shared per store directory, so the operation graph and prepared tables are reused by
        every query of a process (a session reloads the graph when the store changes).
        """
        store = self.store(default_base)
        with _stores_lock:
            log = _sessions.get(store.root)
            if log is None or log.store is not store:
                log = _sessions[store.root] = DSLog(store)
            return log

    def session_for(self, context: "dg.AssetExecutionContext | dg.OpExecutionContext") -> DSLog:
        """The session a query asset or check uses inside a run.

        Without ``store_dir`` or ``$DSLOG_STORE`` this is ``.dslog`` in the instance storage
        directory: the store every :class:`~dslog_dagster.io_managers.DSLogIOManager` and
        ``with_lineage`` IO manager of this resource writes, whatever their ``base_dir``.
        """
        return self.session(context.instance.storage_directory())
