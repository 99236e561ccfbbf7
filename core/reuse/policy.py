"""How eagerly the view registry confirms views, how often it checks them, and whether it may
re-run the user's function to do so (``pure``)."""

from dataclasses import dataclass

__all__ = ["ReusePolicy"]


@dataclass(frozen=True, slots=True)
class ReusePolicy:
    """How eagerly views are confirmed and how often they are checked.

    Attributes:
        confirm_after: ``m``: further matching captures that confirm a dim/gen candidate
            (gen: at ``m`` shapes the candidate had not seen; ICDE uses 1, the thesis 2).
        base_confirm_after: the same for exact-input (base) views; the same input through the
            same code gives the same lineage unless the code is non-deterministic.
        base / dim / gen: which kinds of views are recorded and served.
        pure: the default of calls that do not say (``pure=`` of :meth:`ViewRegistry.run`):
            may the registry run the function more than once per call? False (default):
            the function runs exactly once per call and views are confirmed from observed
            calls alone (``confirm_after`` matching captures on *distinct* input data; a check
            is a capture of the real call). True: probes on synthetic inputs, sampled
            re-runs and a plain run to learn output shapes are allowed (see
            :mod:`dslog_dagster.core.reuse`).
        probe: for pure calls, run synthetic-input probes before confirming a view (strongly
            recommended: two captures of a data-dependent op can agree by chance).
        verify_new: check a view before serving it for exact shapes/arguments it was not
            checked on (a new shape for gen, a new value of an irrelevant argument): pure
            calls by a sampled annotated re-run, others by capturing that call.
        rate: share of hits on already-checked shapes that are checked again: pure calls
            draw at random and re-run a sample, others capture every ``round(1/rate)``-th
            call of a view instead of serving it.
        budget: seconds per registry instance that sampled (``rate``) verifications of pure
            calls may take; new-shape verifications are not limited by it.
        literal_below: extents below this stay literal in shape classes (1, 2, 3 by default:
            broadcasting axes and ``cross``'s 2- and 3-vectors are never generalised).
        irrelevant_after: equal-lineage pairs that make an argument irrelevant.
        max_observations: captures kept per gen candidate for re-fitting (a template needs
            ``p + 1`` affinely independent shapes for ``p`` symbols before it may predict).
        flush_interval: seconds between writes of a served view's hit counter, made by a
            worker thread off the served call's path (also on :meth:`ViewRegistry.flush`,
            which waits for them, and at exit).
        seed: seed of the registry's random choices (sampling, probes), None for fresh.
    """

    confirm_after: int = 2
    base_confirm_after: int = 1
    base: bool = True
    dim: bool = True
    gen: bool = True
    pure: bool = False
    probe: bool = True
    verify_new: bool = True
    rate: float = 0.05
    budget: float = 2.0
    literal_below: int = 4
    irrelevant_after: int = 2
    max_observations: int = 8
    flush_interval: float = 10.0
    seed: int | None = None

    @property
    def period(self) -> int:
        """Every how many calls of a view an impure call is captured as a check (0: never)."""
        return max(1, round(1.0 / self.rate)) if self.rate > 0 else 0

    def __post_init__(self) -> None:
        if self.confirm_after < 0 or self.base_confirm_after < 0:
            msg = "`confirm_after` and `base_confirm_after` must be >= 0."
            raise ValueError(msg)
        if not 0.0 <= self.rate <= 1.0:
            msg = f"`rate` must be within [0, 1], got {self.rate}."
            raise ValueError(msg)
        if self.literal_below < 2:
            msg = (
                "`literal_below` must be at least 2 (extent 1 is always literal), "
                f"got {self.literal_below}."
            )
            raise ValueError(msg)
