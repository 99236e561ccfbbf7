"""The catalog queries behind the store's listings, and their paging.

A store of 100,000 operations cannot be listed by loading every record: a listing asks the
catalog for one *page* of op ids (keyset paging on the op id, the catalog's primary key), and
only that page's records are read from the segment files. Keyset paging (``op_id > after``,
never ``OFFSET``) is what keeps pages exact while writers add operations: an operation never
moves between pages, so none is repeated or skipped.

Kept apart from :mod:`~dslog_dagster.core.store.store` so that the SQL of the listings (and
its validation) is in one place and the store's class stays about files.
"""

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from dslog_dagster.core.store.layout import OP_ID_RE
from dslog_dagster.core.store.records import ArrayRecord, check_name
from dslog_dagster.errors import QueryError

_T = TypeVar("_T")


def page_query(op_name: str | None, limit: int | None, after: str | None) -> tuple[str, list[Any]]:
    """The SQL (and parameters) of one page of ``(op_id, path)`` in op id order.

    Raises:
        QueryError: ``limit`` is not a positive integer or ``after`` not an operation id.
    """
    conds, params = [], []
    if op_name is not None:
        conds.append("op_name = ?")
        params.append(check_name(op_name, "Operation name"))
    if after is not None:
        if not isinstance(after, str) or not OP_ID_RE.match(after):
            msg = (
                f"`after={after!r}` is not an operation id (48 lowercase hex characters): "
                "pass the last op id of the previous page."
            )
            raise QueryError(msg)
        conds.append("op_id > ?")
        params.append(after)
    sql = "SELECT op_id, path FROM operations"
    if conds:
        sql += " WHERE " + " AND ".join(conds)
    sql += " ORDER BY op_id"
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            msg = f"`limit={limit!r}` is not a positive integer (the size of a page)."
            raise QueryError(msg)
        sql += f" LIMIT {int(limit)}"
    return sql, params


def pages(
    fetch: Callable[[int, str | None], Sequence[_T]], key: Callable[[_T], str], page_size: int
) -> Iterator[_T]:
    """Every item of a keyset-paged listing: ``fetch(limit, after)`` gives one page, ``key``
    an item's op id (the next page starts after the last one).

    Raises:
        QueryError: ``page_size`` is not a positive integer.
    """
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        msg = f"`page_size={page_size!r}` is not a positive integer."
        raise QueryError(msg)
    after: str | None = None
    while True:
        page = fetch(page_size, after)
        yield from page
        if len(page) < page_size:
            return
        after = key(page[-1])


def between_query(a: "str | ArrayRecord", b: "str | ArrayRecord") -> tuple[str, list[Any]]:
    """The SQL of the op ids (and segment paths) that read ``a`` and write ``b``.

    An :class:`ArrayRecord` matches its version only; a name matches every version.
    """
    conds, params = [], []
    for role, x in (("input", a), ("output", b)):
        column = "array_id" if isinstance(x, ArrayRecord) else "name"
        conds.append(
            f"EXISTS (SELECT 1 FROM operation_arrays x WHERE x.op_id = o.op_id "
            f"AND x.role = '{role}' AND x.{column} = ?)"
        )
        params.append(x.array_id if isinstance(x, ArrayRecord) else check_name(x, "Array name"))
    sql = f"SELECT o.op_id, o.path FROM operations o WHERE {' AND '.join(conds)} ORDER BY o.op_id"
    return sql, params
