"""The pair-by-pair extraction, kept as the reference the factorised one is tested against.

Why it is here and nowhere else: the extraction every capture uses
(:mod:`~dslog_dagster.core.extraction`) emits ProvRC rows straight from the annotation handles
and never writes one pair per (output cell, input cell). The old extraction did exactly that
(``_annotator.extract``, kept as a native debug entry point): slow and quadratic on shared
sets, but simple, so it is the oracle for exactness. No user path calls it.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.capture import as_input, split_outputs, tracked_output
from dslog_dagster.core.extraction import extract_tables
from dslog_dagster.core.native import annotator as _annotator
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import LineageRelation

__all__ = ["PairsAndTables", "pairs_and_tables", "same_pairs"]

#: ``(considered?, output, input) -> (relation of the old extraction, new stored table,
#: new native table before the store's ProvRC/columnar choice)``.
PairsAndTables = Mapping[tuple[bool, int, int], tuple[LineageRelation, LineageTable, LineageTable]]


def pairs_and_tables(
    func: Callable[..., Any],
    arrays: Sequence[npt.ArrayLike],
    mode: str = "contributing",
    kwargs: Mapping[str, Any] | None = None,
) -> PairsAndTables:
    """Run ``func`` once under a capture and extract every output both ways.

    The raw native table (third item) is built from ``_annotator.extract_tables`` without the
    store's columnar choice, so tests see the merge passes' own rows.
    """
    inputs = [as_input(a, k) for k, a in enumerate(arrays)]
    shapes = [tuple(int(d) for d in a.shape) for a in inputs]
    out: dict[tuple[bool, int, int], tuple[LineageRelation, LineageTable, LineageTable]] = {}
    epoch = _annotator.begin(1 if mode == "considered" else 0)
    try:
        tracked = [_annotator.annotate(a)[0] for a in inputs]
        outs, _ = split_outputs(func(*tracked, **(kwargs or {})))
        arrs = [tracked_output(o, k, "reference") for k, o in enumerate(outs)]
        for o, arr in enumerate(arrs):
            out_shape = tuple(int(d) for d in arr.shape)
            for which in (False, True) if mode == "considered" else (False,):
                old = _annotator.extract(arr, [list(s) for s in shapes], which)
                stored = extract_tables(arr, shapes, which)
                raw, _ = _annotator.extract_tables(arr, [list(s) for s in shapes], which)
                for i, ((oc, ic), table) in enumerate(zip(old, stored, strict=True)):
                    rows, n_pairs, *fields = raw[i]
                    native = LineageTable.from_fields(
                        out_shape, shapes[i], int(rows), int(n_pairs), fields
                    )
                    rel = LineageRelation(out_shape, shapes[i], oc, ic, int(oc.shape[1]))
                    out[(which, o, i)] = (rel, table, native)
    finally:
        _annotator.end(epoch)
    return out


def same_pairs(a: LineageRelation, b: LineageRelation) -> bool:
    """Cell for cell equal (both sorted and duplicate-free)."""
    return (
        a.out_shape == b.out_shape
        and a.in_shape == b.in_shape
        and a.n == b.n
        and bool(np.array_equal(a.out_cols, b.out_cols))
        and bool(np.array_equal(a.in_cols, b.in_cols))
    )
