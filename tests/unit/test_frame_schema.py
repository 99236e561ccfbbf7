"""A frame's schema in its array record: stored when given, absent (``None``) otherwise, and
records written before schemas existed still read."""

import json

import pytest

from dslog_dagster.core.store import LineageStore
from dslog_dagster.core.store.records import ArrayRecord, NewArray, array_record
from dslog_dagster.errors import InvalidRelationError


def test_schema_round_trips_through_the_store(tmp_path) -> None:
    store = LineageStore(tmp_path / "s")
    rec = store.register_array("f", (3, 2), columns=[("a", "int64"), ("b", "object")])
    assert rec.columns == (("a", "int64"), ("b", "object"))
    again = LineageStore(tmp_path / "s").get_array("f")
    assert again.columns == (("a", "int64"), ("b", "object"))
    plain = store.register_array("x", (3,))
    assert plain.columns is None
    assert "columns" not in plain.to_json()


def test_records_without_a_schema_still_read() -> None:
    rec = array_record(NewArray("f", (2, 2), columns=[("a", "f8"), ("b", "f8")]))
    old = rec.to_json()
    del old["columns"]
    back = ArrayRecord.from_json(json.loads(json.dumps(old)))
    assert back.columns is None
    assert back == rec  # the schema does not take part in record equality


def test_schema_must_name_every_column() -> None:
    with pytest.raises(InvalidRelationError, match="schema columns"):
        array_record(NewArray("f", (2, 3), columns=[("a", "f8")]))
    with pytest.raises(InvalidRelationError, match="schema columns"):
        array_record(NewArray("f", (6,), columns=[("a", "f8")]))
