"""SQL literals of the catalog's queries read back as exactly the names given."""

from datetime import datetime

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core.store.sql_text import inline, literal, literal_list
from dslog_dagster.errors import InvalidRelationError

# names as stored: text without NUL and without lone surrogates (no UTF-8 form)
_NAMES = st.text(
    st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20
)


@settings(max_examples=60, deadline=None)
@given(names=st.lists(_NAMES, min_size=1, max_size=5))
def test_literals_read_back_as_the_names(names: list[str]) -> None:
    con = duckdb.connect()
    assert con.execute(f"SELECT {literal(names[0])}").fetchone() == (names[0],)
    assert con.execute(f"SELECT {literal_list(names)}").fetchone() == (names,)


def test_a_name_with_nul_or_not_a_string_is_refused() -> None:
    for bad in ("a\0b", 3):
        with pytest.raises(InvalidRelationError, match="without NUL"):
            literal(bad)  # type: ignore[arg-type]


def test_a_name_that_is_not_valid_unicode_is_refused() -> None:
    with pytest.raises(InvalidRelationError, match="valid Unicode"):
        literal("a\ud800")


_WHEN = st.one_of(st.none(), st.datetimes(datetime(1970, 1, 1), datetime(2200, 1, 1)))


@settings(max_examples=20, deadline=None)
@given(
    row=st.tuples(_NAMES, st.integers(min_value=0, max_value=2**62), _WHEN),
    names=st.lists(_NAMES, max_size=4),
    shape=st.lists(st.integers(min_value=0, max_value=2**40), max_size=3),
)
def test_inlined_statements_store_what_binding_stores(
    row: tuple[str, int, datetime | None], names: list[str], shape: list[int]
) -> None:
    # the catalog's statements with their values inlined (no bind: no pandas import) store
    # and select exactly what the same statements with bound parameters do; a name holding
    # a `?` (inlined before) is not taken for a placeholder
    sql = "INSERT INTO t VALUES (?, ?, ?, ?, ?)"
    got = []
    for bind in (False, True):
        con = duckdb.connect()
        con.execute("CREATE TABLE t (s VARCHAR, n BIGINT, ts TIMESTAMP, l VARCHAR[], b BIGINT[])")
        params = [*row, names, shape]
        text = inline(sql, params)
        assert text is not None
        con.execute(sql, params) if bind else con.execute(text)
        q = f"SELECT * FROM t WHERE s = {literal(row[0])} AND n IN (SELECT unnest(?::BIGINT[]))"
        sel = inline(q, [[row[1]]])
        assert sel is not None
        got.append(con.execute(sel).fetchall())
    assert got[0] == got[1] == [(row[0], row[1], row[2], names, shape)]


def test_inline_refuses_what_it_cannot_write_and_miscounted_placeholders() -> None:
    assert inline("SELECT ?", ["a\0b"]) is None  # a NUL: bind it instead
    with pytest.raises(ValueError, match="placeholders"):
        inline("SELECT ?, ?", [1])
    with pytest.raises(TypeError, match="float"):
        inline("SELECT ?", [1.5])
    assert inline("SELECT '?', ?", ["x"]) == "SELECT '?', 'x'"
