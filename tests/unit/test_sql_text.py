"""SQL literals of the catalog's queries read back as exactly the names given."""

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core.store.sql_text import literal, literal_list
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
