"""The dslog exception tree.

Every error raised on purpose by dslog derives from :class:`DSLogError`, so callers can catch
one class. Subclasses also derive from the matching builtin (``TypeError``, ``ValueError``,
``OSError``, ``KeyError``) so code written against the builtin keeps working. Messages say
what was wrong and, when it is known, what to do about it.

    DSLogError
    ├── UnsupportedArrayError(TypeError)   dtype/rank/shape of an array or column not supported
    ├── InvalidRelationError(ValueError)   a lineage relation does not fit its arrays
    ├── CompressionError                   ProvRC failed (wraps the native error)
    ├── LineageStorageError(OSError)       reading/writing the store or its catalog failed
    │   ├── SchemaVersionError             a file was written by an unknown format version
    │   ├── LineageCorruptError            a file's bytes fail their checksum or do not parse
    │   ├── StoreFullError                 no space left on the store's disk (ENOSPC, EDQUOT)
    │   ├── StoreReadOnlyError             the store's file system or folder is read-only
    │   │                                  (EROFS, or a folder the user may not write)
    │   ├── StorePermissionError(PermissionError)
    │   │                                  the OS refused access to a file (EACCES, EPERM)
    │   └── CatalogLockedError             another process kept the catalog locked
    ├── LineageNotFoundError(KeyError)     no such array / operation / lineage table
    │   ├── DeferredLineageError           a step ran on demand and its lineage was not
    │   │                                  reconstructed yet (`trace` does it)
    │   └── ValueExpiredError              an asset value version removed by retention
    ├── QueryError(ValueError)             a malformed lineage query
    ├── DiscoveryError(LookupError)        no candidate of a search space reproduces the
    │                                      selected output cells (missing-parameter discovery)
    ├── ExportError(ValueError)            lineage cannot be exported as asked (PROV size
    │                                      limit, unknown format, a foreign document)
    ├── ConfigurationError(ValueError)     Dagster definitions or settings that contradict
    │                                      each other (two stores, settings given twice)
    ├── CaptureError                       annotated execution could not record lineage
    │   ├── LineageLostError(TypeError)    lineage would be dropped (cast to a plain dtype,
    │   │                                  a function that rejects tracked_float, float())
    │   ├── ReconstructionError            on-demand lineage cannot be rebuilt (code changed,
    │   │                                  value expired, step not deterministic)
    │   ├── StaleLineageError              a tracked array outlived its capture
    │   │   └── ForgedLineageError         a tracked array made from raw bytes
    │   │                                  (`.view(tracked_float)`, `np.frombuffer`)
    │   └── UnsupportedFrameOperationError(NotImplementedError)
    │                                      a DataFrame operation the Spark capture does not
    │                                      understand (never guessed)
    ├── ReuseError                         a provenance view cannot be used or stored
    ├── SparkUnavailableError(RuntimeError)  Java/Spark missing or the session did not start
    │   └── SparkConnectUnsupportedError   a capture given a Spark Connect session or frame
    └── MissingExtraError(ImportError)     an optional dependency (an extra) is not installed

Warnings (not errors: the call still gets correct lineage, captured instead of reused):

    DSLogWarning(UserWarning)
    ├── ViewMismatchWarning                a confirmed provenance view disagreed with the real
    │                                      lineage of a call and was demoted
    └── DamagedStoreWarning                a listing skipped damaged files of the store (named;
                                           the rest is listed; `dslog fsck` reports them)
"""


class DSLogError(Exception):
    """Base class of every error dslog raises on purpose."""


class UnsupportedArrayError(DSLogError, TypeError):
    """An array or index column has a dtype, rank or layout dslog does not support."""


class InvalidRelationError(DSLogError, ValueError):
    """A lineage relation is inconsistent with the arrays it connects."""


class CompressionError(DSLogError):
    """The ProvRC compressor failed."""


class LineageStorageError(DSLogError, OSError):
    """Reading or writing lineage files or the catalog failed."""


class SchemaVersionError(LineageStorageError):
    """A lineage file was written with a format version this dslog cannot read."""


class LineageCorruptError(LineageStorageError):
    """A file of the lineage store is damaged: its bytes fail their checksum or do not parse.

    Raised instead of answering from damaged bytes. ``path`` names the file; the message names
    the operation or array it held when known, and says what to do: ``dslog fsck STORE
    --quarantine`` moves damaged files aside so the rest of the store keeps working, and
    ``dslog rebuild-catalog STORE`` re-indexes what is left.

    Attributes:
        path: the damaged file (as given to the reader).
    """

    def __init__(self, message: str, path: object = "") -> None:
        super().__init__(message)
        self.path = str(path)


class StoreFullError(LineageStorageError):
    """The file system holding the store is full (``ENOSPC``) or the user's quota is used up
    (``EDQUOT``). Nothing half-written is left visible: free space and run again."""


class StoreReadOnlyError(LineageStorageError):
    """The store cannot be written: its file system is mounted read-only (``EROFS``) or its
    folder is not writable by this user. Reading the store still works."""


class StorePermissionError(LineageStorageError, PermissionError):
    """The operating system refused access to a file or folder of the store (``EACCES``,
    ``EPERM``): give the user running dslog access to it."""


class CatalogLockedError(LineageStorageError):
    """Another process kept the catalog (``catalog.duckdb``) locked for the whole timeout.

    Raised only for a real lock held by another process (DuckDB's "Conflicting lock is
    held"), never for a full disk or a damaged catalog file."""


class LineageNotFoundError(DSLogError, KeyError):
    """An array, operation or lineage table is not in the store."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class DeferredLineageError(LineageNotFoundError):
    """A query met a step that ran with ``policy="on_demand"`` and whose lineage has not been
    reconstructed yet (``trace`` / ``dslog trace`` reconstruct it). ``op_id`` names it."""

    def __init__(self, msg: str, op_id: str = "") -> None:
        super().__init__(msg)
        self.op_id = op_id


class ValueExpiredError(LineageNotFoundError):
    """A stored asset value version was removed by the IO manager's retention setting (its
    lineage stays in the store; the value itself is gone)."""


class QueryError(DSLogError, ValueError):
    """A lineage query is malformed."""


class DiscoveryError(DSLogError, LookupError):
    """Missing-parameter discovery found no candidate in the search space that reproduces
    the selected output cells."""


class ExportError(DSLogError, ValueError):
    """Lineage cannot be exported as asked (too large for the format, an unknown format, a
    document dslog did not write)."""


class ConfigurationError(DSLogError, ValueError):
    """Definitions or settings contradict each other (e.g. two lineage stores, or lineage
    settings given both to an IO manager and to its resource)."""


class CaptureError(DSLogError):
    """Annotated execution (``dslog_dagster.core.capture``) could not record lineage."""


class LineageLostError(CaptureError, TypeError):
    """Lineage would be silently dropped: a cast of ``tracked_float`` to a plain dtype, a NumPy
    function that does not support the dtype, ``float()`` of a tracked value, or code that
    returns plain numbers. Raised instead of recording a wrong (empty) lineage."""


class ReconstructionError(CaptureError):
    """On-demand lineage could not be reconstructed: the step's code changed, a value it needs
    expired, or re-running it does not give the stored output."""


class StaleLineageError(CaptureError):
    """A tracked array from a finished capture was used; its annotations are gone."""


class ForgedLineageError(StaleLineageError):
    """A tracked array's annotation bytes were not produced by the running capture.

    NumPy lets any bytes become ``tracked_float`` elements (``.view(tracked_float)`` of another
    array, ``np.frombuffer``, ``np.ndarray(buffer=...)``) without asking the dtype, so the
    annotator validates every annotation it dereferences and raises this instead of reading
    memory it never wrote. A subclass of :class:`StaleLineageError` because both mean "these
    annotations do not belong to this capture" and code catching that keeps working.
    """


class ReuseError(DSLogError):
    """A provenance view cannot be used or stored (e.g. ``register_operation(reuse=...)``
    without a capture and without a confirmed view, or a damaged view file)."""


class DSLogWarning(UserWarning):
    """Base class of the warnings dslog issues."""


class ViewMismatchWarning(DSLogWarning):
    """A confirmed provenance view disagreed with the real lineage of a call (found by
    verification or by a later capture). The view is demoted to non-reusable for good and the
    call's lineage is captured instead, so results stay correct."""


class DamagedStoreWarning(DSLogWarning):
    """A listing of the store skipped files that are damaged; the message names them. Every
    other operation and array is listed. ``store.damaged()`` returns the files found so far and
    ``store.verify()`` / ``dslog fsck`` check every file."""


class UnsupportedFrameOperationError(CaptureError, NotImplementedError):
    """A DataFrame operation (method or plan node) the Spark capture has no lineage rule for.

    Raised instead of guessing; ``capture_frames(..., on_unknown="all_to_all")`` records a
    flagged, conservative all-to-all relation instead."""


class SparkUnavailableError(DSLogError, RuntimeError):
    """Spark cannot run here: no Java runtime, or the SparkSession did not start."""


class SparkConnectUnsupportedError(SparkUnavailableError):
    """A feature that needs a classic (py4j) SparkSession was given a Spark Connect session
    or frame; refused before any work (see :mod:`dslog_dagster.spark.connect`)."""


class MissingExtraError(DSLogError, ImportError):
    """A feature needs an optional dependency that is not installed; the message names the
    extra (``pip install 'dslog-dagster[spark]'``)."""
