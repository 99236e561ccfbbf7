"""Text cell specs (query configs, `dslog query --cells`) and lineage_between's direction."""

import numpy as np
import pytest

from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.query.cellspec import cells_from_spec, parse_box
from dslog_dagster.errors import LineageNotFoundError, QueryError


def test_parse_box_reads_numpy_basic_indexing() -> None:
    assert parse_box("0:10,3") == (slice(0, 10), 3)
    assert parse_box(" :, -1 ") == (slice(None), -1)
    assert parse_box("") == (slice(None),)
    with pytest.raises(QueryError, match="unit steps"):
        parse_box("0:10:2")
    with pytest.raises(QueryError, match="Cannot read `x`"):
        parse_box("1,x")


def test_cells_from_spec_is_the_union_of_boxes_and_indices() -> None:
    shape = (4, 5)
    got = cells_from_spec(shape, ["0:2,3", "3", "-1,-1"], [[1, 1], [0, 3]])
    want = np.zeros(shape, bool)
    want[0:2, 3] = True
    want[3] = True  # an int is a whole row, as a[3] in NumPy
    want[1, 1] = True
    assert (got.to_mask() == want).all()
    assert cells_from_spec(shape, [":"]).count() == 20
    assert cells_from_spec(shape).is_empty()


def test_cells_from_spec_rejects_cells_outside_the_array() -> None:
    with pytest.raises(QueryError, match="outside axis 0"):
        cells_from_spec((4, 5), ["4"])
    with pytest.raises(QueryError, match="2 entries"):
        cells_from_spec((4, 5), [], [[1, 2, 3]])


def test_lineage_between_direction_is_enforced(tmp_path) -> None:
    log = DSLog(tmp_path)
    x, y = Array("x", (3,)), Array("y", (3,))
    log.register_operation("id", [x], [y], [Lineage(y, x, lambda b: [b])])
    assert log.lineage_between("x", "y", [1], direction="forward").to_flat().tolist() == [1]
    assert log.lineage_between("y", "x", [2], direction="backward").to_flat().tolist() == [2]
    with pytest.raises(LineageNotFoundError, match="`y` is not upstream of `x`"):
        log.lineage_between("x", "y", [1], direction="backward")
    with pytest.raises(LineageNotFoundError, match="`x` is not downstream of `y`"):
        log.lineage_between("y", "x", [2], direction="forward")


def test_a_frame_box_may_name_its_column() -> None:
    cols = ["tconst", "runtimeMinutes", "genres"]
    assert cells_from_spec((10, 3), ["0:10,genres"], columns=cols) == cells_from_spec(
        (10, 3), ["0:10,2"]
    )
    assert cells_from_spec((10, 3), ["4,runtimeMinutes"], columns=cols).to_indices().tolist() == [
        [4, 1]
    ]
    with pytest.raises(QueryError, match="Did you mean `genres`"):
        cells_from_spec((10, 3), ["0:10,genre"], columns=cols)
    with pytest.raises(QueryError, match="has no column names"):
        cells_from_spec((10, 3), ["0:10,genres"])
    with pytest.raises(QueryError, match="names columns on axis 1"):
        cells_from_spec((10, 3), ["genres"], columns=cols)
