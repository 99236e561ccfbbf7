"""Missing-parameter discovery (issue 27 item 4, PROVision §VI-B) on NumPy steps, without a
store: the lineage of the selected cells comes from a capture of the true run."""

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslog_dagster.core.capture import Capture
from dslog_dagster.core.discovery import discover, grid
from dslog_dagster.core.query import CellSet
from dslog_dagster.errors import DiscoveryError, QueryError

F = npt.NDArray[np.float64]


def frame(n: int, seed: int) -> F:
    """Noise around 100 with a few bright blobs (the example's detector frame, smaller)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:n, 0:n]
    f = rng.normal(100.0, 4.0, size=(n, n))
    for _ in range(3):
        cy, cx = rng.uniform(6, n - 6, size=2)
        amp, width = rng.uniform(40.0, 90.0), rng.uniform(1.5, 3.0)
        f += amp * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * width**2))
    return f


def local_hotspots(s: F, factor: float, half: int) -> F:
    """Box blur of radius ``half`` (edge padding), kept where it exceeds ``factor`` x 100."""
    h, w = s.shape
    p = np.pad(s, half, mode="edge")
    k = 2 * half + 1
    total = p[0:h, 0:w]
    for dy in range(k):
        for dx in range(k):
            if dy or dx:
                total = total + p[dy : dy + h, dx : dx + w]
    m = total / (k * k)
    return np.where(m > factor * 100.0, m, 0.0)


def global_hotspots(s: F, sigmas: float) -> F:
    """The example's threshold: a cell is hot above mean + sigmas * std of the whole frame."""
    level = s.mean() + sigmas * s.std()
    return np.where(s > level, s, 0.0)


SPACE = {"half": [1, 2, 3], "factor": [1.0 + 0.05 * i for i in range(10)]}


def lineage_of(
    fn: Callable[..., Any], s: F, true: Mapping[str, Any], box: tuple[slice, slice]
) -> tuple[F, CellSet, dict[str, list[npt.NDArray[np.int64]]]]:
    """The true run's output, the selected cells and each one's input cells (as the store
    would give them)."""
    res = Capture().run(fn, s, **true)
    out = np.asarray(res.outputs[0])
    mask = np.zeros(out.shape, dtype=bool)
    mask[box] = True
    cells = CellSet.from_mask(mask)
    rel = res.relation(0, 0)
    o = np.ravel_multi_index(tuple(rel.out_cols), out.shape)
    c = np.ravel_multi_index(tuple(rel.in_cols), s.shape)
    return out, cells, {"s": [np.sort(c[o == f]) for f in cells.to_flat()]}


def run_of(fn: Callable[..., Any]) -> Callable[[Mapping[str, Any], Mapping[str, Any]], Any]:
    return lambda params, inputs: fn(inputs["s"], **params)


def box_around_hot(out: F, r: int = 2) -> tuple[slice, slice]:
    y, x = np.argwhere(out > 0)[0]
    return slice(max(y - r, 0), y + r + 1), slice(max(x - r, 0), x + r + 1)


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 50),
    half=st.sampled_from(SPACE["half"]),
    factor_i=st.integers(2, 6),
)
def test_found_values_equal_true_config_and_exhaustive_search(
    seed: int, half: int, factor_i: int
) -> None:
    s = frame(48, seed)
    true = {"half": half, "factor": SPACE["factor"][factor_i]}
    out = local_hotspots(s, **true)
    if not (out > 0).any():  # nothing hot: the selection would have no lineage
        return
    out, cells, lineage = lineage_of(local_hotspots, s, true, box_around_hot(out))
    found = discover(run_of(local_hotspots), {"s": s}, out, cells, lineage, SPACE)
    assert true in found.matches
    assert found.how == "part"
    assert found.kept["s"] < s.size  # the part, not the whole frame
    # every candidate that reproduces the cells on the whole input, and no other
    ref = discover(run_of(local_hotspots), {"s": s}, out, cells, lineage, SPACE, exhaustive=True)
    assert found.matches == ref.matches
    assert ref.how == "exhaustive"
    assert ref.runs == len(grid(SPACE))
    assert found.whole_runs < ref.whole_runs  # the part pruned candidates
    assert found.runs == found.part_runs + found.whole_runs


def test_several_matching_values_are_all_reported() -> None:
    s = frame(48, 4)
    true = {"half": 1, "factor": 1.1}
    out = local_hotspots(s, **true)
    out, cells, lineage = lineage_of(local_hotspots, s, true, box_around_hot(out, 1))
    # factors this close keep the same cells around the blob's peak
    space = {"half": [1, 2], "factor": [1.1, 1.1000001, 1.1000002]}
    found = discover(run_of(local_hotspots), {"s": s}, out, cells, lineage, space)
    assert found.matches == tuple({"half": 1, "factor": f} for f in space["factor"])
    assert found.candidates == 6
    assert "3 of 6 candidate(s)" in found.summary()


def test_no_match_is_a_clear_error() -> None:
    s = frame(48, 2)
    true = {"half": 2, "factor": 1.2}
    out = local_hotspots(s, **true)
    out, cells, lineage = lineage_of(local_hotspots, s, true, box_around_hot(out))
    space = {"half": [1, 3], "factor": [1.2]}
    with pytest.raises(DiscoveryError, match="No candidate of the 2 in the search space"):
        discover(run_of(local_hotspots), {"s": s}, out, cells, lineage, space)


def test_whole_input_statistics_fall_back_to_whole_runs() -> None:
    # a kept cell's lineage is itself, but its value depends on the frame's mean and std:
    # the part cannot decide, so discovery notices and runs every candidate on the whole frame
    s = frame(48, 5)
    true = {"sigmas": 2.0}
    out = global_hotspots(s, **true)
    out, cells, lineage = lineage_of(global_hotspots, s, true, box_around_hot(out))
    space = {"sigmas": [1.0, 1.5, 2.0, 2.5, 3.0]}
    found = discover(run_of(global_hotspots), {"s": s}, out, cells, lineage, space)
    assert found.matches == ({"sigmas": 2.0},)
    assert found.how == "whole input"
    assert any("depend on more than the cells their lineage names" in n for n in found.notes)


def test_empty_space_and_selection_are_refused() -> None:
    s = frame(16, 1)
    out = local_hotspots(s, 1.0, 1)
    with pytest.raises(QueryError, match="search space is empty"):
        discover(run_of(local_hotspots), {"s": s}, out, CellSet.full(out.shape), {}, {})
    with pytest.raises(QueryError, match="no candidate values"):
        discover(run_of(local_hotspots), {"s": s}, out, CellSet.full(out.shape), {}, {"half": []})
    with pytest.raises(QueryError, match="No output cells selected"):
        discover(run_of(local_hotspots), {"s": s}, out, CellSet.empty(out.shape), {}, {"half": [1]})


def test_a_step_failing_on_the_part_or_for_a_candidate() -> None:
    s = frame(48, 6)
    true = {"half": 1, "factor": 1.1}
    out = local_hotspots(s, **true)
    out, cells, lineage = lineage_of(local_hotspots, s, true, box_around_hot(out))

    def needs_the_frame(p: Mapping[str, Any], ins: Mapping[str, Any]) -> Any:
        if ins["s"].shape[0] < 48:
            msg = "needs the whole frame"
            raise ValueError(msg)
        if p["factor"] > 1.15:
            msg = "factor out of range"
            raise ValueError(msg)
        return local_hotspots(ins["s"], **p)

    space = {"half": [1], "factor": [1.1, 1.2]}
    found = discover(needs_the_frame, {"s": s}, out, cells, lineage, space)
    assert found.matches == (true,)
    assert found.how == "whole input"
    assert any("failed on the part (ValueError: needs the whole frame)" in n for n in found.notes)
    assert any("1 candidate(s) raised on the whole input" in n for n in found.notes)
