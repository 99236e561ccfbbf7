"""Factored tables (a frame's cell lineage kept as row table × column table) are exact.

A factored table must be indistinguishable from the ProvRC product it stands for: the same
fields when read, the same blob round trip, and — on the query path, which never forms the
product — the same answers, forward and backward, alone and inside a path of hops.
"""

import dataclasses
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import KINDS, relation_between

from dslog_dagster.core import LineageRelation, compress
from dslog_dagster.core.combine import concat_tables, factored_table, product_table
from dslog_dagster.core.format.blob import table_from_blob, table_to_blob
from dslog_dagster.core.query import CellSet, prepare, run_hops
from dslog_dagster.errors import InvalidRelationError, LineageStorageError

FIELDS = ("out_lo", "out_hi", "in_ref", "in_q", "in_r", "in_mult", "in_lo", "in_hi")


def _parts(rng: np.random.Generator, kinds: list[str], fallback: Any) -> list[Any]:
    """Row and column tables of one frame: each part owns its own output columns."""
    n_out, n_in = int(rng.integers(1, 25)), int(rng.integers(1, 25))
    k_out, k_in = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    parts = []
    for cols in np.array_split(rng.permutation(k_out), int(rng.integers(1, 3))):
        if not len(cols):
            continue
        rows = relation_between(rng, (n_out,), (n_in,), kinds)
        picks = [rng.choice(k_in, size=int(rng.integers(1, k_in + 1)), replace=False) for _ in cols]
        jc = np.asarray([(j, c) for j, cs in zip(cols, picks, strict=True) for c in cs])
        col_rel = LineageRelation.from_columns((k_out,), (k_in,), [jc[:, 0]], [jc[:, 1]])
        parts.append((compress(rows, fallback=fallback), compress(col_rel, fallback="never")))
    return parts


def _random_boxes(rng: np.random.Generator, shape: tuple[int, ...]) -> CellSet:
    k = int(rng.integers(0, 6))
    lo = np.stack([rng.integers(0, n, k) for n in shape], axis=1).reshape(k, len(shape))
    hi = np.minimum(lo + rng.integers(0, 5, (k, len(shape))), np.asarray(shape) - 1)
    return CellSet.from_boxes(shape, lo, hi)


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=2),
    fallback=st.sampled_from(["auto", "always", "never"]),
)
def test_factored_table_equals_its_product(seed: int, kinds: list[str], fallback: Any) -> None:
    rng = np.random.default_rng(seed)
    parts = _parts(rng, kinds, fallback)
    product = concat_tables([product_table(r, c) for r, c in parts])
    stored = table_from_blob(table_to_blob(factored_table(parts)))
    assert stored.factors
    assert stored.stored_encoding == "factored"
    assert stored.stored_rows == sum(r.rows + c.rows for r, c in parts)
    assert (stored.rows, stored.n_pairs) == (product.rows, product.n_pairs)
    # queries on the factors (never multiplied out) equal queries on the product
    fact, prod = prepare(stored), prepare(product)
    assert fact.native is None
    assert fact.factors
    for _ in range(4):
        back = _random_boxes(rng, product.out_shape)
        assert run_hops([(fact, "backward")], back) == run_hops([(prod, "backward")], back)
        fwd = _random_boxes(rng, product.in_shape)
        assert run_hops([(fact, "forward")], fwd) == run_hops([(prod, "forward")], fwd)
        # inside a path: native hops before and after a factored one
        if product.out_shape == product.in_shape:
            path_f = [(prod, "forward"), (fact, "forward"), (prod, "backward")]
            path_p = [(prod, "forward"), (prod, "forward"), (prod, "backward")]
            assert run_hops(path_f, fwd) == run_hops(path_p, fwd)
        assert run_hops([(fact, "forward"), (fact, "backward")], fwd) == run_hops(
            [(prod, "forward"), (prod, "backward")], fwd
        )
    # read as ProvRC rows, the table is the product, field by field
    for f in FIELDS:
        assert np.array_equal(getattr(stored, f), getattr(product, f)), f
    assert stored.decompress() == product.decompress()


def test_a_factored_table_is_an_ordinary_table_to_every_reader() -> None:
    rng = np.random.default_rng(5)
    parts = _parts(rng, ["noise", "box"], "auto")
    product = concat_tables([product_table(r, c) for r, c in parts])
    pickled = pickle.loads(pickle.dumps(factored_table(parts)))
    # a changed copy must not keep factors that no longer describe it
    replaced = dataclasses.replace(factored_table(parts), encoded={})
    assert not replaced.factors
    for copy in (pickled, replaced):
        for f in FIELDS:
            assert np.array_equal(getattr(copy, f), getattr(product, f))
    assert table_to_blob(pickled) == table_to_blob(factored_table(parts))
    with pytest.raises(AttributeError):
        _ = factored_table(parts).no_such_field


def test_factored_parts_must_be_one_dimensional_and_agree() -> None:
    rows = compress(LineageRelation.from_columns((4,), (4,), [np.arange(4)], [np.arange(4)]))
    cols = compress(LineageRelation.from_columns((2,), (3,), [np.arange(2)], [np.arange(2)]))
    other = compress(LineageRelation.from_columns((5,), (4,), [np.arange(4)], [np.arange(4)]))
    with pytest.raises(InvalidRelationError, match="at least one"):
        factored_table([])
    with pytest.raises(InvalidRelationError, match="different shapes"):
        factored_table([(rows, cols), (other, cols)])
    with pytest.raises(InvalidRelationError, match="1-D"):
        factored_table([(product_table(rows, cols), cols)])


def test_damaged_factored_blobs_are_refused() -> None:
    rows = compress(LineageRelation.from_columns((4,), (9,), [np.arange(4)], [np.arange(4) * 2]))
    cols = compress(LineageRelation.from_columns((2,), (3,), [np.arange(2)], [np.arange(2)]))
    blob = table_to_blob(factored_table([(rows, cols)]))
    for bad in (blob[:-3], blob + b"\x00", blob.replace(b"\xff", b"\x00", 1)):
        with pytest.raises(LineageStorageError, match="damaged"):
            table_from_blob(bad)
    # a reader that does not know factored tables (it ignores flag bit 3) meets 0xFF where a
    # column code goes and refuses the blob as damaged instead of misreading it
    assert blob[0] & 8
    with pytest.raises(LineageStorageError, match="unknown column code 0xff"):
        table_from_blob(bytes([blob[0] & ~8]) + blob[1:])
