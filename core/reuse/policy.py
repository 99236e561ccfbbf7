"""How eagerly the view registry confirms views and how often it checks them."""

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
        probe: run synthetic-input probes before confirming a view (strongly recommended:
            two captures of a data-dependent op can agree by chance).
        verify_new: verify a view before serving it for exact shapes/arguments it was not
            checked on (a new shape for gen, a new value of an irrelevant argument).
        rate: probability that a hit on an already-checked shape is verified again.
        budget: seconds per registry instance that sampled (``rate``) verifications may
            take; new-shape verifications are not limited by it.
        literal_below: extents below this stay literal in shape classes (1, 2, 3 by default:
            broadcasting axes and ``cross``'s 2- and 3-vectors are never generalised).
        irrelevant_after: equal-lineage pairs that make an argument irrelevant.
        max_observations: captures kept per gen candidate for re-fitting (a template needs
            ``p + 1`` affinely independent shapes for ``p`` symbols before it may predict).
        flush_interval: seconds between writes of a served view's hit counter (also on
            :meth:`ViewRegistry.flush` and at exit).
        seed: seed of the registry's random choices (sampling, probes), None for fresh.
    """

    confirm_after: int = 2
    base_confirm_after: int = 1
    base: bool = True
    dim: bool = True
    gen: bool = True
    probe: bool = True
    verify_new: bool = True
    rate: float = 0.05
    budget: float = 2.0
    literal_below: int = 4
    irrelevant_after: int = 2
    max_observations: int = 8
    flush_interval: float = 10.0
    seed: int | None = None

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
