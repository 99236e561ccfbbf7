"""Missing-parameter discovery (PROVision §VI-B): which config reproduces a stored output?

An output version is in the store, its lineage too, but the parameters the step ran with are
unknown (a config lost, a default changed since). Given a search space — candidate values per
parameter — :func:`discover` finds every combination that reproduces the selected output cells,
without running the step on its whole input once per candidate:

1. **Select.** The stored lineage of each selected output cell names the input cells it was
   computed from. The part of each input to keep is the bounding box of those cells (an input
   none of them reads is kept whole).
2. **Test on the part.** Each candidate runs under capture on the cropped inputs. A cropped
   output cell *is* a selected cell when its lineage, shifted back to the whole input, is the
   selected cell's lineage; the candidate passes when each such cell has the stored value.
   Cells without lineage (constants of the step) cannot be matched and wait for step 4.
3. **Check the part is enough.** Each candidate also runs on a larger box around the part. A
   selected cell whose value changes with the surroundings depends on cells its lineage does
   not name — a comparison against a whole-array statistic, which is control, not lineage —
   so the part proves nothing: every candidate then runs on the whole input instead, and the
   answer says so.
4. **Confirm** every candidate that passed on the whole input (a plain run, the selected cells
   compared with the stored ones, NaN equal to NaN): a reported match always reproduces the
   selected cells exactly.

``exhaustive=True`` skips steps 1–3 and runs every candidate on the whole input (a reference, and
the way to be sure when a step's cells may depend on *where* they are, not only on what their
lineage names).
"""

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dslog_dagster.core.capture import Capture
from dslog_dagster.core.query import CellSet, prepare, run_hops
from dslog_dagster.core.store import ArrayRecord, LineageStore, OperationRecord
from dslog_dagster.core.trace import producer_of
from dslog_dagster.errors import DiscoveryError, LineageNotFoundError, QueryError

__all__ = [
    "Discovery",
    "StepRunner",
    "cell_lineage",
    "discover",
    "discover_in_store",
    "grid",
    "stored_values",
]

StepRunner = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]
"""Runs the step: ``run(params, inputs)`` -> its result (one array, or a tuple of outputs), for
candidate ``params`` (parameter -> value) and ``inputs`` (input name -> array)."""

MAX_SELECTED = 100_000
"""Selected output cells one discovery accepts (each one's lineage is read once)."""

_PER_CELL = 512  # above this many selected cells, a table is expanded once instead
_NONE = np.zeros(0, dtype=np.int64)
_RTOL = 1e-9  # cropped runs may sum in another order; the whole-input confirmation is exact


@dataclass(frozen=True, slots=True)
class Discovery:
    """What :func:`discover` found.

    Attributes:
        matches: every candidate that reproduces the selected cells (parameter -> value), in
            the search space's order.
        candidates: how many candidates the search space holds.
        runs: how many times the step ran in all (``part_runs + whole_runs``).
        part_runs: runs on the lineage-selected part (and the larger box that checks it).
        whole_runs: runs on the whole input (confirmations, or every candidate).
        how: ``"part"`` (candidates tested on the selected part, survivors confirmed),
            ``"whole input"`` (every candidate ran on the whole input) or ``"exhaustive"``.
        selected: selected output cells.
        kept: input name -> cells of it the part kept.
        seconds: wall time.
        notes: why the answer was obtained the way it was.
    """

    matches: tuple[dict[str, Any], ...]
    candidates: int
    runs: int
    part_runs: int
    whole_runs: int
    how: str
    selected: int
    kept: dict[str, int]
    seconds: float
    notes: tuple[str, ...] = field(default=())

    def rows(self) -> list[dict[str, Any]]:
        """One plain row per matching candidate (for tables, JSON and metadata)."""
        return [dict(m) for m in self.matches]

    def summary(self) -> str:
        found = "; ".join(", ".join(f"{k}={v!r}" for k, v in m.items()) for m in self.matches)
        kept = ", ".join(f"{k}: {n:,} cells" for k, n in self.kept.items())
        lines = [
            f"{len(self.matches)} of {self.candidates} candidate(s) reproduce the "
            f"{self.selected:,} selected cell(s): {found}.",
            f"{self.runs} run(s) of the step ({self.part_runs} on the selected part, "
            f"{self.whole_runs} on the whole input; {self.how}) in {self.seconds:.2f} s.",
        ]
        if kept:
            lines.append(f"Part kept: {kept}.")
        lines.extend(self.notes)
        return "\n".join(lines)


def grid(space: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of a search space, the last parameter varying fastest.

    Raises:
        QueryError: an empty space, or a parameter without candidate values.
    """
    if not space:
        msg = "The search space is empty; give at least one parameter and its values."
        raise QueryError(msg)
    for name, values in space.items():
        if len(values) == 0:
            msg = f"Parameter `{name}` has no candidate values in the search space."
            raise QueryError(msg)
    names = list(space)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*space.values())]


def stored_values(
    load: Callable[[ArrayRecord], Any], records: Sequence[ArrayRecord]
) -> dict[str, Any]:
    """The stored value of each record (by name), as ``load`` gives it.

    Raises:
        LineageNotFoundError: a value is not stored (expired by retention): discovery needs
            the step's inputs to re-run it and its output to compare with.
    """
    values: dict[str, Any] = {}
    for rec in records:
        value = load(rec)
        if value is None:
            msg = (
                f"The value of `{rec.name}` version `{rec.version}` is not stored (expired by "
                "retention?); discovery re-runs the step on its inputs and compares with its "
                "output."
            )
            raise LineageNotFoundError(msg)
        values[rec.name] = value
    return values


def cell_lineage(
    store: LineageStore, array: ArrayRecord, cells: CellSet, op: OperationRecord | None = None
) -> tuple[dict[str, ArrayRecord], dict[str, list[npt.NDArray[np.int64]]]]:
    """The inputs of the operation that produced ``array`` and, per input name, the flat
    input cells each selected cell (in ``cells.to_flat()`` order) was computed from.

    Raises:
        LineageNotFoundError: ``array`` is a source, or its producer ran on demand.
        QueryError: too many selected cells.
    """
    op = op if op is not None else producer_of(store, array)
    if op is None:
        msg = (
            f"`{array.name}` version `{array.version}` has no producing step in the store (a "
            "source): there is no step whose parameters could be discovered."
        )
        raise LineageNotFoundError(msg)
    if not op.tables:
        msg = (
            f"The step that produced `{array.name}` (`{op.op_name}`, {op.capture_method}) stored "
            "no lineage, and discovery selects the input by it. Materialize the step with "
            'policy="capture" (an on-demand step cannot be reconstructed without its config).'
        )
        raise LineageNotFoundError(msg)
    if cells.count() > MAX_SELECTED:
        msg = f"{cells.count():,} cells selected; discovery takes at most {MAX_SELECTED:,}."
        raise QueryError(msg)
    flat = cells.to_flat()
    inputs = {a.name: a for a in op.inputs}
    per: dict[str, list[npt.NDArray[np.int64]]] = {}
    for t in op.tables:
        if t.output != array.name:
            continue
        table = store.read_lineage(op, t.output, t.input)
        if len(flat) <= _PER_CELL:  # a query per cell: cheap for a few cells of a big table
            hop = prepare(table)
            per[t.input] = [
                run_hops([(hop, "backward")], CellSet.from_flat(array.shape, [o])).to_flat()
                for o in flat
            ]
            continue
        rel = table.decompress()  # many cells: every pair once, then grouped by output cell
        o = np.ravel_multi_index(tuple(rel.out_cols), rel.out_shape) if rel.n else _NONE
        c = np.ravel_multi_index(tuple(rel.in_cols), rel.in_shape) if rel.n else _NONE
        keep = np.isin(o, flat)
        o, c = o[keep], c[keep]
        order = np.lexsort((c, o))
        o, c = o[order], c[order]
        bounds = np.searchsorted(o, np.concatenate([flat, flat[-1:] + 1]))
        bounds[-1] = len(o)
        per[t.input] = [
            np.asarray(c[bounds[j] : bounds[j + 1]], np.int64) for j in range(len(flat))
        ]
    return inputs, per


def discover_in_store(
    store: LineageStore,
    array: ArrayRecord,
    cells: CellSet,
    space: Mapping[str, Sequence[Any]],
    run: StepRunner,
    load: Callable[[ArrayRecord], Any],
    *,
    output: int = 0,
    exhaustive: bool = False,
    producer: OperationRecord | None = None,
) -> Discovery:
    """:func:`discover` for a stored array version: its lineage selects the input part, its
    stored value (``load``) is what candidates must reproduce; ``run`` gets the producing
    step's inputs by their array names in the store. ``producer``: the operation that made
    ``array``, when the caller has it already.

    Raises:
        LineageNotFoundError: no lineage to select by (see :func:`cell_lineage`), or a value
            that is not stored (expired by retention).
    """
    inputs, lineage = cell_lineage(store, array, cells, producer)
    values = {n: np.asarray(v) for n, v in stored_values(load, (*inputs.values(), array)).items()}
    stored = values.pop(array.name)
    return discover(
        run, values, stored, cells, lineage, space, output=output, exhaustive=exhaustive
    )


def discover(
    run: StepRunner,
    inputs: Mapping[str, npt.NDArray[Any]],
    stored: npt.NDArray[Any],
    cells: CellSet,
    lineage: Mapping[str, Sequence[npt.NDArray[np.int64]]],
    space: Mapping[str, Sequence[Any]],
    *,
    output: int = 0,
    exhaustive: bool = False,
) -> Discovery:
    """Find every candidate in ``space`` that reproduces ``cells`` of ``stored`` (see the
    module docstring for the steps).

    Args:
        run: runs the step (:data:`StepRunner`).
        inputs: the step's input arrays by name, at the versions the stored output was made
            from.
        stored: the stored value of the step's output ``output``.
        cells: the selected cells of ``stored``.
        lineage: per input name, the flat input cells each selected cell (in
            ``cells.to_flat()`` order) was computed from (:func:`cell_lineage`).
        space: candidate values per parameter.
        output: which of the step's outputs ``stored`` is.
        exhaustive: run every candidate on the whole input (no selection).

    Raises:
        DiscoveryError: no candidate reproduces the selected cells.
        QueryError: an empty space or selection, or a selection outside ``stored``.
    """
    t0 = time.perf_counter()
    candidates = grid(space)
    if cells.is_empty():
        msg = "No output cells selected; select the cells the parameters must reproduce."
        raise QueryError(msg)
    if tuple(cells.shape) != tuple(stored.shape):
        msg = f"The selection is over shape {cells.shape}, the stored output has {stored.shape}."
        raise QueryError(msg)
    flat = cells.to_flat()
    whole = _WholeRuns(run, inputs, stored, flat, output)
    notes: list[str] = []
    if exhaustive:
        matches = [p for p in candidates if whole.reproduces(p)]
        return _answer(matches, candidates, 0, whole, "exhaustive", flat, {}, t0, notes)
    part = _Part(run, inputs, stored, flat, lineage, output)
    kept = {name: int(np.prod(hi - lo)) for name, (lo, hi) in part.tight.items()}
    survivors: list[dict[str, Any]] = []
    faithful = True
    if part.unmatched == len(flat) or not part.smaller:
        why = (
            "none of the selected cells has lineage (constants of the step)"
            if part.unmatched == len(flat)
            else "the selected cells' lineage covers the whole input"
        )
        notes.append(f"Every candidate ran on the whole input: {why}.")
        matches = [p for p in candidates if whole.reproduces(p)]
        return _answer(matches, candidates, 0, whole, "whole input", flat, kept, t0, notes)
    for p in candidates:
        try:
            verdict = part.test(p)
        except Exception as e:  # the step (or its capture) cannot run on the part
            notes.append(
                f"With {_fmt(p)} the step failed on the part ({type(e).__name__}: {e}): every "
                "candidate ran on the whole input."
            )
            faithful = False
            break
        if verdict is None:
            faithful = False
            notes.append(
                f"With {_fmt(p)} the selected cells' values changed when the part grew, so they "
                "depend on more than the cells their lineage names (a comparison against a "
                "statistic of the whole input, which is control, not lineage, or the size of "
                "the part): every candidate ran on the whole input."
            )
            break
        if verdict:
            survivors.append(p)
    if faithful and part.unmatched:
        notes.append(
            f"{part.unmatched:,} selected cell(s) have no lineage (constants of the step): "
            "checked on the part where the matched cells place them, and on the whole input."
        )
    if faithful:
        matches = [p for p in survivors if whole.reproduces(p)]
        how = "part"
    else:
        matches = [p for p in candidates if whole.reproduces(p)]
        how = "whole input"
    return _answer(matches, candidates, part.runs, whole, how, flat, kept, t0, notes)


def _failed_note(whole: "_WholeRuns") -> list[str]:
    if not whole.failed:
        return []
    first = whole.failed[0]
    return [
        f"{len(whole.failed)} candidate(s) raised on the whole input and count as not "
        f"reproducing (first: {_fmt(first[0])}: {first[1]})."
    ]


def _answer(
    matches: list[dict[str, Any]],
    candidates: list[dict[str, Any]],
    part_runs: int,
    whole: "_WholeRuns",
    how: str,
    flat: npt.NDArray[np.int64],
    kept: dict[str, int],
    t0: float,
    notes: list[str],
) -> Discovery:
    runs = part_runs + whole.runs
    notes = [*notes, *_failed_note(whole)]
    if not matches:
        msg = (
            f"No candidate of the {len(candidates)} in the search space reproduces the "
            f"{len(flat):,} selected cell(s) ({runs} run(s) of the step, {how}). Widen the "
            "search space (other values, or another parameter), or check that the step's code "
            "and inputs are the ones that made this output." + "".join(" " + n for n in notes)
        )
        raise DiscoveryError(msg)
    return Discovery(
        tuple(matches), len(candidates), runs, part_runs, whole.runs, how, len(flat), kept,
        time.perf_counter() - t0, tuple(notes),
    )  # fmt: skip


def _fmt(p: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in p.items())


def _output(result: Any, k: int) -> npt.NDArray[Any]:
    return np.asarray(result[k] if isinstance(result, tuple) else result)


class _WholeRuns:
    """Plain runs on the whole input, compared with the stored selected cells exactly."""

    def __init__(
        self,
        run: StepRunner,
        inputs: Mapping[str, npt.NDArray[Any]],
        stored: npt.NDArray[Any],
        flat: npt.NDArray[np.int64],
        output: int,
    ) -> None:
        self.run, self.inputs, self.output = run, inputs, output
        self.shape = stored.shape
        self.want = stored.reshape(-1)[flat]
        self.flat = flat
        self.runs = 0
        self.failed: list[tuple[dict[str, Any], str]] = []

    def reproduces(self, params: Mapping[str, Any]) -> bool:
        """Does ``params`` give the stored selected cells? A candidate the step raises on
        does not (recorded in ``failed``)."""
        self.runs += 1
        try:
            got = _output(self.run(params, self.inputs), self.output)
        except Exception as e:  # a value the step's own code refuses
            self.failed.append((dict(params), f"{type(e).__name__}: {e}"))
            return False
        if got.shape != self.shape:
            return False
        return _equal(got.reshape(-1)[self.flat], self.want, rtol=0.0)


def _equal(a: npt.NDArray[Any], b: npt.NDArray[Any], *, rtol: float) -> bool:
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        if rtol == 0.0:
            return bool(np.array_equal(a64, b64, equal_nan=True))
        return bool(np.allclose(a64, b64, rtol=rtol, atol=0.0, equal_nan=True))
    return bool(np.array_equal(a, b))


Box = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


class _Part:
    """Captured runs on the lineage-selected part of the inputs (and on a larger box)."""

    def __init__(
        self,
        run: StepRunner,
        inputs: Mapping[str, npt.NDArray[Any]],
        stored: npt.NDArray[Any],
        flat: npt.NDArray[np.int64],
        lineage: Mapping[str, Sequence[npt.NDArray[np.int64]]],
        output: int,
    ) -> None:
        self.run, self.inputs, self.output = run, dict(inputs), output
        self.names = list(self.inputs)
        for name in lineage:
            if name not in self.inputs:
                msg = f"The lineage names input `{name}`, which the step's inputs lack."
                raise QueryError(msg)
        self.want = stored.reshape(-1)[flat]
        self.flat, self.out_shape = flat, stored.shape
        self.last: tuple[Any, Any, Any, list[Any]] = (None, None, None, [])
        self.tight: dict[str, Box] = {}
        self.grown: dict[str, Box] = {}
        for name, value in self.inputs.items():
            shape = np.asarray(value.shape, dtype=np.int64)
            cells = [c for c in lineage.get(name, ()) if len(c)]
            if not cells:  # no selected cell reads it: keep it whole
                lo, hi = np.zeros_like(shape), shape.copy()
            else:
                idx = np.stack(np.unravel_index(np.concatenate(cells), value.shape))
                lo, hi = idx.min(axis=1), idx.max(axis=1) + 1
            self.tight[name] = (lo, hi)
            margin = hi - lo  # as wide again on every side
            self.grown[name] = (np.maximum(lo - margin, 0), np.minimum(hi + margin, shape))
        # each selected cell's lineage, as a key comparable with a cropped run's cells
        self.keys: list[tuple[bytes, ...] | None] = []
        for j in range(len(flat)):
            per = tuple(
                np.sort(lineage[n][j]).tobytes() if n in lineage else b"" for n in self.names
            )
            self.keys.append(None if not any(per) else per)
        self.unmatched = sum(k is None for k in self.keys)
        self.key_digests = [
            int(
                _digests(
                    [
                        (np.zeros(len(c), np.int64), c)
                        for c in (np.frombuffer(b, dtype=np.int64) for b in key)
                    ],
                    1,
                )[0]
            )
            if key is not None
            else 0
            for key in self.keys
        ]
        self.smaller = any(
            self.tight[n][0].any() or (self.tight[n][1] != np.asarray(self.inputs[n].shape)).any()
            for n in self.names
        )
        self.grows = any(
            (self.tight[n][0] != self.grown[n][0]).any()
            or (self.tight[n][1] != self.grown[n][1]).any()
            for n in self.names
        )
        self.runs = 0

    def test(self, params: Mapping[str, Any]) -> bool | None:
        """Does candidate ``params`` give the stored values on the part? ``None``: the part
        is not enough (a selected cell's value moved when the part grew).

        The verdict comes from the run on the grown box, where the cells a selected cell is
        computed from sit away from the crop's edge; the tight run only checks that the
        values do not depend on how much surrounds them. A cropped cell whose lineage touches
        a cut edge of its crop is never taken for a selected cell: its lineage may be the
        selected cell's as a set while an edge-padded cell counts twice."""
        tight = self._values(params, self.tight) if self.grows else []
        grown = self._values(params, self.grown)  # last: _constants_hold reads its run
        if self.grows:
            for t, g in zip(tight, grown, strict=True):
                if t is _EDGE or g is _EDGE:
                    continue
                if (t is None) != (g is None):
                    return None
                both = isinstance(t, np.ndarray) and isinstance(g, np.ndarray)
                if both and not _equal(t, g, rtol=_RTOL):
                    return None
        for j, got in enumerate(grown):
            if self.keys[j] is None:
                continue
            if not isinstance(got, np.ndarray) or not _equal(got, self.want[j : j + 1], rtol=_RTOL):
                return False
        return self._constants_hold()

    def _constants_hold(self) -> bool:
        """The selected cells without lineage (constants of the step, such as the zeros of a
        threshold), checked on the grown run where that is sound: the matched cells place the
        crop at one offset of the output, and the cropped cell at a constant's place has a
        lineage clear of the crop's cut edges, so the whole run computes it the same way —
        from input cells, where the stored cell is a constant — and the candidate fails
        unless the values agree. Anywhere else the constant waits for the confirmation."""
        if not self.unmatched:
            return True
        out, edge, has, hits = self.last
        if not hits:
            return True
        shift = {tuple(np.subtract(o, c)) for o, c in hits}
        if len(shift) != 1 or out.ndim != len(self.out_shape):
            return True  # no single offset: no place for the constants
        d = np.asarray(next(iter(shift)), dtype=np.int64)
        flat_out = out.reshape(-1)
        for j, key in enumerate(self.keys):
            if key is not None:
                continue
            c = np.asarray(np.unravel_index(int(self.flat[j]), self.out_shape)) - d
            if (c < 0).any() or (c >= np.asarray(out.shape)).any():
                continue
            k = int(np.ravel_multi_index(tuple(c), out.shape))
            if (
                has[k]
                and not edge[k]
                and not _equal(flat_out[k : k + 1], self.want[j : j + 1], rtol=_RTOL)
            ):
                return False
        return True

    def _values(self, params: Mapping[str, Any], boxes: Mapping[str, Box]) -> list[Any]:
        """Run on the ``boxes`` crops under capture; per selected cell, the value of the
        cropped output cell with its lineage (a 1-element array), ``None`` when no cropped
        cell has it, or ``_EDGE`` when only cells touching a cut edge of the crop have it."""
        self.runs += 1
        crops = [np.ascontiguousarray(self.inputs[n][_slices(boxes[n])]) for n in self.names]

        def call(*arrays: Any) -> Any:
            return self.run(params, dict(zip(self.names, arrays, strict=True)))

        res = Capture(mode="contributing").run(call, *crops)
        out = np.asarray(res.outputs[self.output])
        pairs: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        edge = np.zeros(out.size, dtype=bool)
        for i, n in enumerate(self.names):
            rel = res.relation(self.output, i)
            if rel.n == 0:
                pairs.append((np.zeros(0, np.int64), np.zeros(0, np.int64)))
                continue
            lo, hi = boxes[n]
            full = np.asarray(self.inputs[n].shape, dtype=np.int64)
            o = np.asarray(np.ravel_multi_index(tuple(rel.out_cols), out.shape), np.int64)
            ins = rel.in_cols + lo[:, None]
            cut_lo = (lo > 0)[:, None] & (ins == lo[:, None])
            cut_hi = (hi < full)[:, None] & (ins == (hi - 1)[:, None])
            np.logical_or.at(edge, o, (cut_lo | cut_hi).any(axis=0))
            flat_in = np.ravel_multi_index(tuple(ins), self.inputs[n].shape)
            pairs.append((o, np.asarray(flat_in, np.int64)))
        digest = _digests(pairs, out.size)
        where: dict[int, list[int]] = {}
        for cell in np.flatnonzero(digest):
            where.setdefault(int(digest[cell]), []).append(int(cell))
        flat_out = out.reshape(-1)
        found: list[Any] = []
        hits: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        for j, key in enumerate(self.keys):
            hit: Any = None
            if key is not None:
                for c in where.get(self.key_digests[j], ()):
                    if _lineage_of(pairs, c) != key:  # the digest agreed; check exactly
                        continue
                    if not edge[c]:
                        hit = flat_out[c : c + 1]
                        if out.ndim == len(self.out_shape):
                            at = np.unravel_index(int(self.flat[j]), self.out_shape)
                            there = np.unravel_index(c, out.shape)
                            hits.append((tuple(map(int, at)), tuple(map(int, there))))
                        break
                    hit = _EDGE
            found.append(hit)
        self.last = (out, edge, digest != 0, hits)
        return found


_EDGE = object()  # a selected cell's lineage found only on cells touching a crop's cut edge


def _slices(box: Box) -> tuple[slice, ...]:
    return tuple(slice(int(a), int(b)) for a, b in zip(*box, strict=True))


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _mix(cells: npt.NDArray[np.int64], i: int) -> npt.NDArray[np.uint64]:
    """A well-spread 64-bit code per (input ``i``, flat input cell)."""
    with np.errstate(over="ignore"):
        x = (cells.astype(np.uint64) + np.uint64(i + 1) * np.uint64(0xC2B2AE3D27D4EB4F)) * _MIX
        x ^= x >> np.uint64(29)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(32)
    return x


def _digests(
    pairs: Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]], size: int
) -> npt.NDArray[np.uint64]:
    """Per output cell, an order-free digest of its lineage (0: none); equal lineage, equal
    digest."""
    digest = np.zeros(size, dtype=np.uint64)
    for i, (o, c) in enumerate(pairs):
        if len(o):
            with np.errstate(over="ignore"):
                np.add.at(digest, o, _mix(c, i))
    return digest


def _lineage_of(
    pairs: Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]], cell: int
) -> tuple[bytes, ...]:
    return tuple(np.sort(c[o == cell]).tobytes() for o, c in pairs)
