"""Fuzz the core API and the ``dslog`` command line with hostile arguments: every failure is
a :class:`~dslog_dagster.errors.DSLogError` subclass with a message, never a bare builtin
exception (``TypeError``, ``ValueError``, ``KeyError``, ``RecursionError``, ``OverflowError``),
and the command line answers with exit code 1 or 2 and one line, never a traceback.

Derandomized and bounded so the module runs in well under a minute. Arguments mix values the
API takes (small shapes, registered names) with hostile ones (floats, huge and negative ints,
uint64 extremes, strings with NUL or lone surrogates, non-string keys, deep nesting, wrong
containers), so calls get past their first check and meet the later ones.
"""

import contextlib
import io
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dslog_dagster.cli import main
from dslog_dagster.core import LineageRelation
from dslog_dagster.core.api import Array, DSLog, Lineage
from dslog_dagster.core.query.cells import CellSet, as_cells
from dslog_dagster.core.query.cellspec import cells_from_spec, parse_box
from dslog_dagster.core.relation import as_shape
from dslog_dagster.core.store import NewArray
from dslog_dagster.errors import DSLogError

FUZZ = settings(
    derandomize=True,
    max_examples=200,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # a failure names its call; no slow shrinking
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class _Deep(list[Any]):
    """A list nested deeper than Python's recursion limit, whose own repr is short: hypothesis
    prints the arguments of every example under CI, and its printer recurses."""

    def __repr__(self) -> str:
        return "[[[...3000 levels...]]]"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))


_NESTED = _Deep()
_cur: list[Any] = _NESTED
for _ in range(3000):  # deeper than Python's recursion limit
    _cur.append([])
    _cur = _cur[0]

HOSTILE_INTS = st.sampled_from(
    [-1, -(2**63), 2**31, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70]
) | st.integers(-3, 5)
NAMES = st.sampled_from(["x", "y", "z", "w", "", "\x00", "a\ud800", "x/y", "..", "é"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    HOSTILE_INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([3.5, 3.0, -0.0]),
    NAMES,
    st.text(max_size=6),
    st.binary(max_size=4),
    st.sampled_from([slice(None), slice(1, 3), slice(0, 4, 2), slice("a"), Ellipsis]),
    st.just(object()),
)
ARRAYS = st.sampled_from(
    [
        np.array([2**64 - 1], dtype=np.uint64),
        np.array([0, 1], dtype=np.uint64),
        np.array([1.5, 2.0]),
        np.array([True, False]),
        np.array([[0, 1], [1, 0]]),
        np.array([[0, 0, 0]]),
        np.array(["a", "b"]),
        np.array([None, 1], dtype=object),
        np.array([2**70, 1], dtype=object),
        np.zeros((0,)),
        np.zeros((2, 3), dtype=bool),
        np.array(5),
    ]
)
VALUES = st.recursive(
    SCALARS | ARRAYS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), HOSTILE_INTS, st.none()), inner, max_size=3),
    ),
    max_leaves=8,
) | st.just(_NESTED)
SHAPES = st.sampled_from([(3, 2), (2,), (), (0, 2), (4,), 3]) | VALUES


def _no_bare_exception(call: Callable[[], object]) -> None:
    """Run ``call``: it may succeed or raise a DSLogError with a message, nothing else."""
    message = "ok"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warnings are not failures here
        try:
            call()
        except DSLogError as e:
            message = str(e).strip()
        except Exception as e:
            pytest.fail(f"bare {type(e).__name__} escaped: {e!r}")
    assert message, "a DSLogError without a message"


@pytest.fixture(scope="module")
def log() -> Iterator[DSLog]:
    with tempfile.TemporaryDirectory() as d:
        log = DSLog(Path(d) / "store")
        x, y, z = Array("x", (3, 2)), Array("y", (3, 2)), Array("z", (2,))
        log.register_operation("neg", [x], [y], [Lineage(y, x, lambda b: [b])])
        log.register_operation(
            "sum", [y], [z], [Lineage(z, y, lambda b: [(i, b[0]) for i in range(3)])]
        )
        yield log


@FUZZ
@given(shape=SHAPES, cells=VALUES, boxes=VALUES, indices=VALUES)
def test_cells_never_raise_bare(shape: Any, cells: Any, boxes: Any, indices: Any) -> None:
    _no_bare_exception(lambda: as_shape(shape, "Fuzz"))
    _no_bare_exception(lambda: as_cells(shape, cells).count())
    _no_bare_exception(lambda: CellSet.full(shape).count())
    _no_bare_exception(lambda: CellSet.from_flat(shape, cells).count())
    _no_bare_exception(lambda: CellSet.from_indices(shape, indices).count())
    _no_bare_exception(lambda: CellSet.from_boxes(shape, boxes, indices).count())
    _no_bare_exception(lambda: CellSet.from_mask(cells, shape).count())
    _no_bare_exception(lambda: cells_from_spec(shape, boxes, indices).count())
    _no_bare_exception(lambda: parse_box(boxes))


def test_a_box_with_a_slice_of_strings_is_a_query_error() -> None:
    """Found by the fuzz test under CI: ``slice(None, "a")`` in a box raised a bare TypeError."""
    with pytest.raises(DSLogError, match="not a slice of integers"):
        as_cells((4,), [slice(None), slice(None, "a")]).count()
    with pytest.raises(DSLogError, match="not a slice of integers"):
        as_cells((4,), (slice(0, 4, 0),)).count()


@FUZZ
@given(a=SHAPES, b=SHAPES, c=VALUES, d=VALUES, n=VALUES)
def test_relations_never_raise_bare(a: Any, b: Any, c: Any, d: Any, n: Any) -> None:
    _no_bare_exception(lambda: LineageRelation.from_columns(a, b, c, d, n=n))
    _no_bare_exception(lambda: LineageRelation.from_pairs(a, b, c, d))
    _no_bare_exception(lambda: LineageRelation.from_flat(a, b, c, d))


@FUZZ
@given(
    name=NAMES | VALUES,
    shape=SHAPES,
    dtype=st.sampled_from(["float64", "nonsense", "i4,", "int64", None, 5]) | VALUES,
    asset_key=st.sampled_from([None, "a/b", ["a", "b"], 5, [1, 2], ""]) | VALUES,
    version=st.sampled_from([None, "v1"]) | VALUES,
)
def test_arrays_never_raise_bare(
    log: DSLog, name: Any, shape: Any, dtype: Any, asset_key: Any, version: Any
) -> None:
    store = log.store
    _no_bare_exception(lambda: Array(name, shape, dtype, version))
    _no_bare_exception(lambda: store.register_array(name, shape, dtype, asset_key, version))
    _no_bare_exception(lambda: store.get_array(name, version))
    _no_bare_exception(lambda: store.operations_between(name, version))


@FUZZ
@given(
    op_name=st.sampled_from(["op", "neg"]) | VALUES,
    inputs=st.sampled_from([["x"], ["y"], ["x", "x"], "x", []]) | VALUES,
    outputs=st.sampled_from([["y"], ["x"], [NewArray("n", (3, 2))], "y"]) | VALUES,
    lineage=st.sampled_from([{}, {("y", "x"): None}]) | VALUES,
    args=st.sampled_from([None, {1: 2}, {"a": _NESTED}, {"a": float("nan")}]) | VALUES,
    capture_method=st.sampled_from(["user"]) | VALUES,
    timings=st.sampled_from([None, {"t": 1.0}, {"t": "slow"}, {1: 1.0}]) | VALUES,
)
def test_register_operation_never_raises_bare(
    log: DSLog,
    op_name: Any,
    inputs: Any,
    outputs: Any,
    lineage: Any,
    args: Any,
    capture_method: Any,
    timings: Any,
) -> None:
    store = log.store
    _no_bare_exception(
        lambda: store.register_operation(
            op_name, inputs, outputs, lineage, args, capture_method, timings
        )
    )


@settings(FUZZ, max_examples=30)  # each call reads the catalog (a DuckDB connection)
@given(
    path=st.lists(st.sampled_from(["x", "y", "z"]) | NAMES | VALUES, max_size=4) | VALUES,
    cells=st.sampled_from([np.s_[0, :], 0, [(0, 1)], np.s_[:]]) | VALUES,
    capture=st.sampled_from(
        [
            lambda b: 5,
            lambda b: [b],
            lambda b: [1.5],
            lambda b: "ab",
            lambda b: [(True, 0)],
            lambda b: [(0, 0, 0)],
            [(np.s_[:], np.s_[:])],
            [(np.s_[:], 7)],
            np.array([[0, 0, 0, 0]]),
            np.array([[0, 0]]),
        ]
    )
    | VALUES,
    op_args=st.sampled_from([None, {1: 2}, {"k": [1, 2]}]) | VALUES,
)
def test_session_never_raises_bare(
    log: DSLog, path: Any, cells: Any, capture: Any, op_args: Any
) -> None:
    x, w = Array("x", (3, 2)), Array("w", (3, 2))
    _no_bare_exception(
        lambda: log.register_operation("fz", [x], [w], [Lineage(w, x, capture)], op_args)
    )
    _no_bare_exception(lambda: log.register_operation("fz", [x], [w], {("w", "x"): capture}))
    _no_bare_exception(lambda: log.prov_query(path, cells))
    first = path[0] if isinstance(path, list) and path else path
    _no_bare_exception(lambda: log.lineage_between(first, "x", cells))
    _no_bare_exception(lambda: log.store.get_operation(first))
    _no_bare_exception(lambda: log.store.read_lineage(first, "y", "x"))
    _no_bare_exception(lambda: log.store.operations(first))
    _no_bare_exception(lambda: log.store.sql(first, cells))


# ------------------------------------------------------------------------ command line

_COMMANDS = ["init", "inspect", "sql", "rebuild-catalog", "query", "compact", "fsck", "nope"]


def _tokens(root: Path) -> st.SearchStrategy[str]:
    words = [
        "x", "y", "z", "w", "", "0:2", "1,1", "5,5", "-1", "a:b", "::", "0:2,0:2,0:2",
        "--cells", "--between", "--count", "--format", "json", "csv", "table", "--direction",
        "forward", "backward", "--partition", "p", "--output", "--engine", "native",
        "--quarantine", "--help", "SELECT 1", "SELECT * FROM arrays", "DROP TABLE arrays",
        "SELECT read_text('/etc/hostname')", "select", "\x00", "a\ud800", "9" * 30,
        "0:" + "9" * 30, str(root / "missing" / "o.parquet"), str(root / "o.parquet"),
    ]  # fmt: skip
    return st.sampled_from(words) | st.text(max_size=5)


@pytest.fixture(scope="module")
def cli_root(log: DSLog) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "a-file").write_text("not a store")
        yield Path(d)


def _run_cli(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: --help (0) and usage errors (2)
            code = e.code if isinstance(e.code, int) else 2
        except Exception as e:
            pytest.fail(f"`dslog {' '.join(argv)}` raised {type(e).__name__}: {e!r}")
    return code, err.getvalue()


@FUZZ
@given(data=st.data())
def test_cli_never_shows_a_traceback(log: DSLog, cli_root: Path, data: st.DataObject) -> None:
    stores = [str(log.store.root)] * 4 + [
        str(cli_root),
        str(cli_root / "a-file"),
        str(cli_root / "new" / os.urandom(4).hex()),
    ]
    command = data.draw(st.sampled_from(_COMMANDS))
    target = data.draw(st.sampled_from(stores))
    rest = data.draw(st.lists(_tokens(cli_root), max_size=6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, err = _run_cli([command, target, *rest])
    assert code in (0, 1, 2, 3), (code, err)
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("dslog: ")]
    if code in (1, 2) and not err.startswith("usage:"):
        assert len(errors) == 1, err
        assert errors[0] == err.strip().splitlines()[-1], "one line: the error is the last"
