"""What an operation did to its frames: its DPDS operation kinds and column-level effect.

DPDS (dataframe provenance, slides in the papers folder) classifies every preprocessing
operation by one of twelve templates — :data:`KINDS` — and describes it by what it did to the
frame's shape: columns added, removed, renamed or transformed, rows dropped or generated.
Knowing them, the canned queries answer "which imputations touched this cell".

The captures know them from what they already see (the pandas method called, Spark's plan
node, a NumPy relation's structure); nothing is inferred after the fact. An operation whose
capture did not record them (written before the field existed, or by a capture that cannot
tell) has ``effects=None`` and reads as :data:`UNKNOWN`, never as a guess.

Stored in the operation record under ``"effects"``, with its own format version
(:data:`EFFECTS_VERSION`): the record's JSON gains one key only when it has effects, so stores
written before still open, and a reader meeting a newer effects version reads them as unknown
rather than misreading them.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dslog_dagster.errors import InvalidRelationError

__all__ = [
    "APPEND",
    "DIMENSIONALITY_REDUCTION",
    "EFFECTS_VERSION",
    "FEATURE_AUGMENTATION",
    "FEATURE_RENAME",
    "FEATURE_SELECTION",
    "IMPUTATION",
    "INSTANCE_DROP",
    "INSTANCE_GENERATION",
    "JOIN",
    "KINDS",
    "SPACE_AUGMENTATION",
    "SPACE_TRANSFORMATION",
    "UNKNOWN",
    "VALUE_TRANSFORMATION",
    "OperationEffects",
    "Step",
    "kinds_of",
]

FEATURE_SELECTION = "feature_selection"
"""Reduction by projection: some columns kept, the others removed."""
INSTANCE_DROP = "instance_drop"
"""Reduction by selection: some rows kept (a filter, a top-k, duplicates dropped)."""
FEATURE_AUGMENTATION = "feature_augmentation"
"""Vertical augmentation: a new column computed from the row's cells."""
INSTANCE_GENERATION = "instance_generation"
"""Horizontal augmentation: new rows computed from others (a group-by's aggregates)."""
DIMENSIONALITY_REDUCTION = "dimensionality_reduction"
"""Space transformation to fewer columns, each computed from several (a row-wise reduction)."""
SPACE_AUGMENTATION = "space_augmentation"
"""Space transformation to more columns from one (one-hot encoding)."""
SPACE_TRANSFORMATION = "space_transformation"
"""The cells rearranged into another shape (pivot, melt, stack, explode, a transpose)."""
VALUE_TRANSFORMATION = "value_transformation"
"""Values changed in place, each from its own cells (arithmetic, a cast, a clip)."""
IMPUTATION = "imputation"
"""Missing values filled (``fillna``, ``replace``, ``interpolate``)."""
FEATURE_RENAME = "feature_rename"
"""Columns renamed, values unchanged."""
JOIN = "join"
"""Rows of two frames matched on keys."""
APPEND = "append"
"""Frames stacked (append / union / concat) or combined as a cartesian product."""

KINDS = (
    FEATURE_SELECTION,
    INSTANCE_DROP,
    FEATURE_AUGMENTATION,
    INSTANCE_GENERATION,
    DIMENSIONALITY_REDUCTION,
    SPACE_AUGMENTATION,
    SPACE_TRANSFORMATION,
    VALUE_TRANSFORMATION,
    IMPUTATION,
    FEATURE_RENAME,
    JOIN,
    APPEND,
)
"""The twelve DPDS operation kinds, in the slides' order."""

UNKNOWN = "unknown"
"""The kind of an operation whose capture did not record one."""

EFFECTS_VERSION = 1
"""Format version of the stored effects (``{"version": 1, "steps": [...]}``)."""


def _names(v: Iterable[Any] | None) -> tuple[str, ...] | None:
    return None if v is None else tuple(str(x) for x in v)


@dataclass(frozen=True, slots=True)
class Step:
    """One call of an operation (a pandas method, a Spark plan node, a NumPy capture).

    Attributes:
        call: what ran (``"DataFrame.fillna"``, ``"spark.Filter"``, ``"numpy"``).
        kinds: its DPDS kinds (:data:`KINDS`), or ``("unknown",)``.
        added / removed / transformed: column names (NumPy: column positions as text);
            ``None`` when not known (an array too wide to list, a capture that cannot tell).
        renamed: ``(old, new)`` column names.
        rows_dropped / rows_generated: rows of the input(s) that reach no output row, and
            output rows that are no input row (aggregates, joined rows, appended frames);
            ``None`` when not known.
    """

    call: str
    kinds: tuple[str, ...]
    added: tuple[str, ...] | None = ()
    removed: tuple[str, ...] | None = ()
    renamed: tuple[tuple[str, str], ...] = ()
    transformed: tuple[str, ...] | None = ()
    rows_dropped: int | None = None
    rows_generated: int | None = None

    def __post_init__(self) -> None:
        bad = [k for k in self.kinds if k not in KINDS and k != UNKNOWN]
        if not self.kinds or bad:
            msg = (
                f"Step `{self.call}` has operation kinds {list(self.kinds)}; each must be one "
                f"of {list(KINDS)} or `{UNKNOWN}`."
            )
            raise InvalidRelationError(msg)

    def to_json(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "kinds": list(self.kinds),
            "added": None if self.added is None else list(self.added),
            "removed": None if self.removed is None else list(self.removed),
            "renamed": [list(p) for p in self.renamed],
            "transformed": None if self.transformed is None else list(self.transformed),
            "rows_dropped": self.rows_dropped,
            "rows_generated": self.rows_generated,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Step":
        def count(v: Any) -> int | None:
            return None if v is None else int(v)

        return cls(
            str(d["call"]),
            tuple(str(k) for k in d["kinds"]),
            _names(d.get("added")),
            _names(d.get("removed")),
            tuple((str(a), str(b)) for a, b in d.get("renamed", ())),
            _names(d.get("transformed")),
            count(d.get("rows_dropped")),
            count(d.get("rows_generated")),
        )


@dataclass(frozen=True, slots=True)
class OperationEffects:
    """The steps of one registered operation, in the order they ran."""

    steps: tuple[Step, ...]
    version: int = field(default=EFFECTS_VERSION, compare=False)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every kind of the steps, first occurrence first; ``("unknown",)`` with no step."""
        out: list[str] = []
        for s in self.steps:
            out.extend(k for k in s.kinds if k not in out)
        return tuple(out) or (UNKNOWN,)

    def columns(self, what: str) -> tuple[str, ...] | None:
        """The union of the steps' ``added``, ``removed`` or ``transformed`` columns (``None``
        when one step does not know its own)."""
        out: list[str] = []
        for s in self.steps:
            cols = getattr(s, what)
            if cols is None:
                return None
            out.extend(c for c in cols if c not in out)
        return tuple(out)

    def summary(self) -> str:
        """One line: ``kinds; +added -removed ~transformed old->new; rows -d +g``."""
        parts = [", ".join(self.kinds)]
        if self.kinds == (UNKNOWN,):
            return UNKNOWN
        marks = []
        for sign, what in (("+", "added"), ("-", "removed"), ("~", "transformed")):
            cols = self.columns(what)
            if cols is None:
                marks.append(f"{sign}?")
            elif cols:
                marks.append(" ".join(f"{sign}{c}" for c in cols))
        marks += [f"{a}->{b}" for s in self.steps for a, b in s.renamed]
        if marks:
            parts.append(" ".join(marks))
        dropped = [s.rows_dropped for s in self.steps if s.rows_dropped]
        generated = [s.rows_generated for s in self.steps if s.rows_generated]
        if dropped or generated:
            parts.append(f"rows -{sum(dropped)} +{sum(generated)}")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "steps": [s.to_json() for s in self.steps]}

    @classmethod
    def from_json(cls, d: Any) -> "OperationEffects | None":
        """The stored effects; ``None`` (unknown) when absent or of a newer format."""
        if d is None or int(d.get("version", 0)) > EFFECTS_VERSION:
            return None
        return cls(tuple(Step.from_json(s) for s in d["steps"]), int(d["version"]))


def kinds_of(effects: "OperationEffects | None") -> tuple[str, ...]:
    """An operation's kinds: ``("unknown",)`` when its capture recorded none."""
    return (UNKNOWN,) if effects is None else effects.kinds


def step(
    call: str,
    kinds: Sequence[str],
    *,
    added: Iterable[Any] | None = (),
    removed: Iterable[Any] | None = (),
    renamed: Iterable[tuple[Any, Any]] = (),
    transformed: Iterable[Any] | None = (),
    rows_dropped: int | None = None,
    rows_generated: int | None = None,
) -> Step:
    """A :class:`Step` with column labels of any type (kept as text)."""
    return Step(
        call,
        tuple(kinds),
        _names(added),
        _names(removed),
        tuple((str(a), str(b)) for a, b in renamed),
        _names(transformed),
        rows_dropped,
        rows_generated,
    )
