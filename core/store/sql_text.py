"""SQL string literals for the catalog's DuckDB queries, so a query binds no parameters.

DuckDB's Python client imports pandas on the first parameter bind of a process (it checks
each parameter against pandas' types), which costs a fresh process seconds under load: the
first ``prov_query`` of a Dagster step or a ``dslog`` call paid it. The catalog's hot reads
therefore put names into the SQL text as literals instead, quoted here. Names are checked
strings without NUL (``check_name``); a literal is the standard SQL one (``'`` doubled, no
backslash escapes), which DuckDB reads back as exactly the string given.
"""

from collections.abc import Iterable

from dslog_dagster.errors import InvalidRelationError


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
