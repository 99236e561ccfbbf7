"""How Dagster assets are named in the lineage store.

One rule, shared by the decorators, the IO managers, the query assets and the checks, so that
a lineage query written against asset keys finds the arrays the IO manager registered. It does
not import Dagster: an asset key is accepted as anything with a ``path`` (``dg.AssetKey``), a
sequence of path components, or an already-joined string.

An asset is an array named by its key's path joined with ``/``; each partition of a
partitioned asset is its own array, ``"<key>[<partition>]"``. Each materialization is a new
*version* of that array (the Dagster run id), so re-materializing never overwrites the lineage
of an earlier run. An op output that is not an asset is named by its step and output
(:func:`op_array_name`), versioned by run id as well.
"""

from collections.abc import Sequence
from typing import Protocol

__all__ = ["array_name", "op_array_name"]


class _HasPath(Protocol):
    @property
    def path(self) -> Sequence[str]: ...


def array_name(
    asset_key: "_HasPath | Sequence[str] | str", partition_key: str | None = None
) -> str:
    """The store's array name for an asset (and partition).

    Examples:
        >>> array_name(["images", "smoothed"])
        'images/smoothed'
        >>> array_name("counts", "2026-11-21")
        'counts[2026-11-21]'
    """
    if isinstance(asset_key, str):
        name = asset_key
    else:
        path = asset_key.path if hasattr(asset_key, "path") else asset_key
        name = "/".join(str(p) for p in path)
    if not name:
        msg = "An asset key must have at least one path component."
        raise ValueError(msg)
    return name if partition_key is None else f"{name}[{partition_key}]"


def op_array_name(step_key: str, output_name: str) -> str:
    """The store's array name of an op output that is not an asset: ``"<step key>:<output>"``."""
    return f"{step_key}:{output_name}"
