"""SQL string literals for the catalog's DuckDB queries, so a query binds no parameters.

DuckDB's Python client imports pandas on the first parameter bind of a process (it checks
each parameter against pandas' types), which costs a fresh process seconds under load: the
first ``prov_query`` of a Dagster step or a ``dslog`` call paid it. The catalog's reads and
its sync (:func:`execute`) therefore put values into the SQL text as literals instead,
quoted here. Names are checked
strings without NUL (``check_name``); a literal is the standard SQL one (``'`` doubled, no
backslash escapes), which DuckDB reads back as exactly the string given.
"""

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from dslog_dagster.errors import InvalidRelationError

if TYPE_CHECKING:
    import duckdb


def literal(value: str) -> str:
    """``value`` as a SQL string literal (``'it''s'``).

    Raises:
        InvalidRelationError: ``value`` is not a string, holds a NUL character or a lone
            surrogate (no stored name does: check the name passed in).
    """
    if not isinstance(value, str) or "\0" in value:
        msg = f"Cannot query the catalog for {value!r}: names are strings without NUL."
        raise InvalidRelationError(msg)
    try:
        value.encode("utf-8")  # a lone surrogate has no UTF-8 form: no stored name has it
    except UnicodeEncodeError:
        msg = f"Cannot query the catalog for {value!r}: names are valid Unicode (UTF-8) text."
        raise InvalidRelationError(msg) from None
    return "'" + value.replace("'", "''") + "'"


def literal_list(values: Iterable[str]) -> str:
    """``values`` as a DuckDB ``VARCHAR[]`` literal (``['a', 'b']::VARCHAR[]``)."""
    return "[" + ", ".join(literal(v) for v in values) + "]::VARCHAR[]"


def value(v: object) -> str:
    """A Python value of a catalog row as a SQL literal: ``None``, ``bool``, ``int``,
    ``str``, a naive ``datetime`` (a ``TIMESTAMP``) or a list of them (a DuckDB list).

    Raises:
        InvalidRelationError: a string :func:`literal` refuses.
        TypeError: another type (a float: the catalog has none).
    """
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, str):
        return literal(v)
    if isinstance(v, datetime):
        return "TIMESTAMP " + literal(v.isoformat(sep=" "))
    if isinstance(v, list | tuple):
        return "[" + ", ".join(value(x) for x in v) + "]"
    msg = f"no SQL literal for a {type(v).__name__} in the catalog"
    raise TypeError(msg)


def inline(sql: str, params: Sequence[object]) -> str | None:
    """``sql`` with each ``?`` replaced by the literal of its parameter, or ``None`` when a
    parameter has no literal (a string with NUL or without UTF-8 form: bind it instead).
    ``sql`` is one of our own statements: a ``?`` outside a quoted literal is a placeholder."""
    parts = _split_placeholders(sql)
    if len(parts) != len(params) + 1:
        msg = f"{len(parts) - 1} placeholders for {len(params)} parameters: {sql}"
        raise ValueError(msg)
    try:
        lits = [value(p) for p in params]
    except InvalidRelationError:
        return None
    out = [parts[0]]
    for lit, part in zip(lits, parts[1:], strict=True):
        out += [lit, part]
    return "".join(out)


def _split_placeholders(sql: str) -> list[str]:
    """``sql`` cut at each ``?`` outside a single-quoted literal (a name already inlined may
    hold one; ``''`` inside a literal toggles twice, so it stays inside)."""
    parts, start, quoted = [], 0, False
    for i, ch in enumerate(sql):
        if ch == "'":
            quoted = not quoted
        elif ch == "?" and not quoted:
            parts.append(sql[start:i])
            start = i + 1
    parts.append(sql[start:])
    return parts


def execute(con: "duckdb.DuckDBPyConnection", sql: str, params: Sequence[object] = ()) -> None:
    """Run one of our statements with its parameters as literals (no bind, so no pandas
    import: the module docstring), binding them only when one has no literal."""
    text = inline(sql, params) if params else sql
    if text is None:
        con.execute(sql, list(params))
    else:
        con.execute(text)
