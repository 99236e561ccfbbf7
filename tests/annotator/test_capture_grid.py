"""The native annotator against the reference, over the whole coverage grid, in both modes.

For every grid case ``dslog_dagster.core.capture.capture`` must return the values plain NumPy
computes — bit for bit, except the README's documented rounding-only exception (``dot``,
``inner``, ``multi_dot``: :data:`ROUNDING_ONLY`, compared to 1e-12) — and, per (output, input),
exactly the reference's lineage — the contributing relation
in both modes and, with ``mode="considered"``, the considered relation too. A function NumPy
itself cannot run on a user dtype must raise the documented ``LineageLostError`` instead
(:data:`RAISES`). The grid has no known gaps: no case is marked xfail.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dslog_dagster.core.capture import Capture, CaptureResult
from dslog_dagster.core.relation import LineageRelation
from dslog_dagster.errors import LineageLostError
from tests.annotator.grid import CASES, GridCase
from tests.annotator.reference import MODES, Mode, reference_capture, to_relations

# Grid functions NumPy cannot run on a user dtype: ``capture`` must raise LineageLostError
# naming the function (and the README's coverage table must list them, see below).
RAISES: dict[str, str] = {
    # np.interp is C code (`compiled_interp`) that converts its operands to float64.
    "interp": "could not run on tracked_float arrays in `numpy` function `interp`",
}

# The README's one documented exception to bit-identical values: BLAS dot per output cell
# where float64 NumPy calls dgemm (or a different summation order).
ROUNDING_ONLY = frozenset({"dot", "inner", "multi_dot"})

PARAMS = [pytest.param(case, mode, id=f"{case.id}-{mode}") for case in CASES for mode in MODES]


def _pairs(rel: LineageRelation) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    u = rel.unique()
    return {(tuple(r[: u.out_rank]), tuple(r[u.out_rank :])) for r in u.pairs().tolist()}


def assert_same_relation(got: LineageRelation, want: LineageRelation, what: str) -> None:
    """Relation equality with a readable difference (a few missing/extra pairs)."""
    assert (got.out_shape, got.in_shape) == (want.out_shape, want.in_shape), what
    if got == want:
        return
    g, w = _pairs(got), _pairs(want)
    missing, extra = sorted(w - g)[:6], sorted(g - w)[:6]
    pytest.fail(
        f"{what}: {len(w - g)} pair(s) missing, {len(g - w)} extra "
        f"(output index, input index): missing {missing}, extra {extra}"
    )


def assert_values(case: GridCase, got: tuple[np.ndarray, ...], want: Any) -> None:
    wants = tuple(want) if isinstance(want, tuple | list) else (want,)
    assert len(got) == len(wants), f"{case.id}: {len(got)} outputs, NumPy has {len(wants)}"
    for k, (g, w) in enumerate(zip(got, wants, strict=True)):
        w_arr = np.asarray(w, dtype=np.float64)
        assert g.dtype == np.float64
        assert g.shape == w_arr.shape, f"{case.id} output {k}"
        if case.name not in ROUNDING_ONLY:
            np.testing.assert_array_equal(g, w_arr, err_msg=f"{case.id} output {k}")
        else:  # one BLAS dot per cell vs NumPy's dgemm: same sums, other rounding
            np.testing.assert_allclose(
                g, w_arr, rtol=1e-12, atol=1e-12, err_msg=f"{case.id} output {k}"
            )


def run_capture(case: GridCase, inputs: list[np.ndarray], mode: Mode) -> CaptureResult:
    with np.errstate(all="ignore"):
        return Capture(mode=mode).run(case.func, *inputs)


@pytest.mark.parametrize(("case", "mode"), PARAMS)
def test_capture_matches_reference(case: GridCase, mode: Mode) -> None:
    inputs = case.inputs()
    if case.name in RAISES:
        with pytest.raises(LineageLostError, match=re.escape(RAISES[case.name])):
            run_capture(case, inputs, mode)
        return
    with np.errstate(all="ignore"):
        want_values = case.func(*inputs)
    result = run_capture(case, inputs, mode)
    assert not result.flagged
    assert_values(case, result.outputs, want_values)

    shapes = [a.shape for a in inputs]
    ref_values, contributing = reference_capture(case.ref, *inputs, mode="contributing")
    want = to_relations(ref_values, contributing, shapes)
    assert set(result.relations) == set(want), case.id
    for key, rel in want.items():
        assert_same_relation(result.relations[key], rel, f"{case.id} contributing {key}")
    if mode == "considered":
        _, considered = reference_capture(case.ref, *inputs, mode="considered")
        want_con = to_relations(ref_values, considered, shapes)
        assert result.considered is not None
        assert set(result.considered) == set(want_con), case.id
        for key, rel in want_con.items():
            assert_same_relation(result.considered[key], rel, f"{case.id} considered {key}")
    else:
        assert result.considered is None


def _readme_raising_rows() -> str:
    """The rows of the docs' coverage table that list functions raising LineageLostError."""
    page = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "capture.md"
    text = page.read_text(encoding="utf-8")
    return "\n".join(
        line for line in text.splitlines() if line.startswith("|") and "LineageLostError" in line
    )


@pytest.mark.parametrize("name", sorted(RAISES))
def test_unsupported_functions_are_in_the_readme_coverage_table(name: str) -> None:
    rows = _readme_raising_rows()
    assert rows, "docs/concepts/capture.md has no coverage-table row for LineageLostError"
    assert f"`{name}`" in rows, f"`{name}` is not in the docs' LineageLostError row"
