"""Which characters of which input column a string column is made of: its *term*, read from
the analyzed plan.

Character-range lineage (:mod:`dslog_dagster.spark.characters`) needs, for an output string
column, the chain of string functions between it and the input columns it was cut from —
``regexp_extract(explode(split(line, ' ')), '(\\d+)', 1)`` — as a small tree this module builds
from Spark's analyzed plan (the same plan :mod:`~dslog_dagster.spark.plan` reads for column
lineage). Walking down from the output attribute, a ``Project`` contributes its alias's
expression, ``Generate(Explode(split(...)))`` an :class:`Explode`, an ``Aggregate`` passes
through its grouping keys (a key's value is one of its group's values), ``Filter``, sorts,
limits and joins pass through, and an input's own plan ends the walk in a :class:`Leaf`.

Every function with a character rule has its node here; anything else (a Python or Scala UDF,
``translate``, ``regexp_replace``, a cast, an aggregate's value, a union, a window value) makes
:class:`NoCharacters`, whose message says why, and the column keeps whole-cell lineage (it is
reported, never guessed).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dslog_dagster.spark.plan import PASS_THROUGH, is_slot, output_ids, output_of, seq

__all__ = [
    "Concat",
    "Explode",
    "Item",
    "Leaf",
    "Lit",
    "NoCharacters",
    "Split",
    "Term",
    "TermWalker",
    "Unary",
    "leaves",
]


class NoCharacters(Exception):
    """A column's characters cannot be traced; the message says why (shown to the user)."""


@dataclass(frozen=True)
class Leaf:
    """Column ``column`` (index among the visible columns) of input ``input``."""

    input: int
    column: int


@dataclass(frozen=True)
class Lit:
    """A string literal: its characters come from no input."""

    value: str | None


@dataclass(frozen=True)
class Unary:
    """A function of one string whose result is a piece of it (``substring``, ``left``,
    ``right``, ``trim``, ``ltrim``, ``rtrim``, ``regexp_extract``), the same characters
    (``lower``, ``upper``) or it with padding (``lpad``, ``rpad``); ``args`` are the
    function's literal arguments after the string."""

    fn: str
    child: "Term"
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Split:
    """``split(child, pattern, limit)``: an array of tokens (only under :class:`Item` or
    :class:`Explode`)."""

    child: "Term"
    pattern: str
    limit: int


@dataclass(frozen=True)
class Item:
    """Token ``index`` (0-based) of a split (``split(...)[k]``, ``getItem(k)``)."""

    split: Split
    index: int


@dataclass(frozen=True)
class Explode:
    """One row per token of a split (``explode(split(...))``)."""

    split: Split


@dataclass(frozen=True)
class Concat:
    """``concat(parts)`` (``sep is None``) or ``concat_ws(sep, parts)``."""

    parts: tuple["Term", ...]
    sep: str | None = None


Term = Leaf | Lit | Unary | Item | Explode | Concat

_PASS = {"Filter", *PASS_THROUGH}  # a filter keeps its values (its rows are cell lineage)

_UNARY = {
    "Lower": "lower",
    "Upper": "upper",
    "StringTrim": "trim",
    "StringTrimLeft": "ltrim",
    "StringTrimRight": "rtrim",
}

_OPAQUE = {"PythonUDF", "ScalaUDF", "PandasUDF", "ArrowEvalPython", "BatchEvalPython"}


def leaves(term: Term) -> list[Leaf]:
    """The distinct input columns a term reads, in first-use order."""
    out: list[Leaf] = []

    def visit(t: Term | Split) -> None:
        if isinstance(t, Leaf):
            if t not in out:
                out.append(t)
        elif isinstance(t, Unary | Split):
            visit(t.child)
        elif isinstance(t, Item | Explode):
            visit(t.split)
        elif isinstance(t, Concat):
            for p in t.parts:
                visit(p)

    visit(term)
    return out


def _literal(e: Any, what: str) -> Any:
    if e.nodeName() != "Literal":
        msg = f"{what} is an expression, not a literal"
        raise NoCharacters(msg)
    v = e.value()
    if v is None:
        return None
    return v if isinstance(v, int | float | bool) else str(v.toString())


def _int_literal(e: Any, what: str) -> int:
    v = _literal(e, what)
    if not isinstance(v, int) or isinstance(v, bool):
        msg = f"{what} is not an integer literal"
        raise NoCharacters(msg)
    return v


def _str_literal(e: Any, what: str) -> str:
    v = _literal(e, what)
    if not isinstance(v, str):
        msg = f"{what} is not a string literal"
        raise NoCharacters(msg)
    return v


class TermWalker:
    """Builds the :data:`Term` of output attributes of a plan over the capture's inputs.

    ``bases`` are the inputs' own analyzed plans with their visible column names (in the
    order of :class:`~dslog_dagster.spark.frame_capture.FrameInput.columns`).
    """

    def __init__(self, bases: Sequence[tuple[Any, Sequence[str]]]) -> None:
        self.bases = list(bases)

    def _base(self, node: Any) -> int | None:
        for k, (plan, _) in enumerate(self.bases):
            if node.equals(plan):
                return k
        for k, (plan, _) in enumerate(self.bases):
            if node.sameResult(plan) and str(node.output().toString()) == str(
                plan.output().toString()
            ):
                return k
        return None

    def attribute(self, node: Any, eid: int) -> Term:
        """The term of attribute ``eid`` of plan ``node``.

        Raises:
            NoCharacters: the attribute's characters cannot be traced (the message says why).
        """
        t = self._attr(node, eid, False)
        if isinstance(t, Split):
            msg = "it is an array of tokens, not a string"
            raise NoCharacters(msg)
        return t

    def _attr(self, node: Any, eid: int, arrays: bool) -> "Term | Split":
        """:meth:`attribute`, also giving a :class:`Split` where ``arrays`` (a column holding
        a split, exploded or indexed in a later step)."""
        k = self._base(node)
        if k is not None:
            name = dict((i, n) for n, i in output_of(node))[eid]
            cols = list(self.bases[k][1])
            if is_slot(name) or name not in cols:
                msg = "it reads no visible input column"
                raise NoCharacters(msg)
            return Leaf(k, cols.index(name))
        name = node.nodeName()
        children = seq(node.children())
        if name in _PASS:
            return self._attr(children[0], eid, arrays)
        if name == "Project":
            ids = output_ids(node)
            return self.expression(node.projectList().apply(ids.index(eid)), children[0], arrays)
        if name == "Generate":
            gen_ids = [a.exprId().id() for a in seq(node.generatorOutput())]
            if eid not in gen_ids:
                return self._attr(children[0], eid, arrays)
            gen = node.generator()
            if gen.nodeName() != "Explode":
                msg = f"it is made by the generator `{gen.nodeName()}` (only explode has a rule)"
                raise NoCharacters(msg)
            return Explode(self._split(gen.child(), children[0]))
        if name == "Aggregate":
            return self._aggregate(node, eid, children[0])
        if name == "Join":
            for child in children:
                if eid in output_ids(child):
                    return self._attr(child, eid, arrays)
        if name == "Window":
            window_ids = [e.exprId().id() for e in seq(node.windowExpressions())]
            if eid not in window_ids:
                return self._attr(children[0], eid, arrays)
        msg = f"it comes through a `{name}` plan node, which has no character rule"
        raise NoCharacters(msg)

    def _aggregate(self, node: Any, eid: int, child: Any) -> Term:
        ids = output_ids(node)
        e = node.aggregateExpressions().apply(ids.index(eid))
        inner = e.child() if e.nodeName() == "Alias" else e
        for g in seq(node.groupingExpressions()):
            if inner.semanticEquals(g):
                return self._term(inner, child)
        msg = "it is an aggregate's value (only grouping keys keep their characters)"
        raise NoCharacters(msg)

    def _split(self, e: Any, child: Any) -> Split:
        t = self.expression(e, child, arrays=True)
        if not isinstance(t, Split):
            msg = "it is an element of an array that is not a `split` of a string"
            raise NoCharacters(msg)
        return t

    def _term(self, e: Any, child: Any) -> Term:
        t = self.expression(e, child)
        assert not isinstance(t, Split)  # only made where arrays are allowed
        return t

    def expression(self, e: Any, child: Any, arrays: bool = False) -> "Term | Split":
        """The term of expression ``e`` evaluated over plan ``child`` (a :class:`Split` only
        where ``arrays``: under an item or an explode).

        Why one function: one branch per Spark expression with a character rule, each a few
        lines; split apart they would only pass the same three arguments around.
        """
        name = e.nodeName()
        kids = seq(e.children())
        if name == "Alias":
            return self.expression(kids[0], child, arrays)
        if name == "AttributeReference":
            return self._attr(child, e.exprId().id(), arrays)
        if name == "Literal":
            if str(e.dataType().typeName()) != "string":
                msg = "a non-string literal is cast into it"
                raise NoCharacters(msg)
            return Lit(_literal(e, "the literal"))
        if name in _UNARY and len(kids) == 1:
            return Unary(_UNARY[name], self._term(kids[0], child))
        if name == "Substring":
            pos = _int_literal(kids[1], "substring's position")
            n = _int_literal(kids[2], "substring's length")
            return Unary("substring", self._term(kids[0], child), (pos, n))
        if name in ("Left", "Right"):
            n = _int_literal(kids[1], f"{name.lower()}'s length")
            return Unary(name.lower(), self._term(kids[0], child), (n,))
        if name == "RegExpExtract":
            pattern = _str_literal(kids[1], "regexp_extract's pattern")
            idx = _int_literal(kids[2], "regexp_extract's group")
            return Unary("regexp_extract", self._term(kids[0], child), (pattern, idx))
        if name in ("StringLPad", "StringRPad"):
            n = _int_literal(kids[1], "the padded length")
            pad = _str_literal(kids[2], "the pad")
            fn = "lpad" if name == "StringLPad" else "rpad"
            return Unary(fn, self._term(kids[0], child), (n, pad))
        if name == "GetArrayItem" and kids[0].nodeName() == "StringSplit":
            return Item(self._split(kids[0], child), _int_literal(kids[1], "the token's index"))
        if name == "StringSplit" and arrays:
            pattern = _str_literal(kids[1], "split's pattern")
            limit = _int_literal(kids[2], "split's limit")
            return Split(self._term(kids[0], child), pattern, limit)
        if name in ("Concat", "ConcatWs"):
            sep = None
            if name == "ConcatWs":
                sep = _str_literal(kids[0], "concat_ws's separator")
                kids = kids[1:]
            for k in kids:
                if str(k.dataType().typeName()) != "string":
                    msg = f"`{name.lower()}` has a non-string argument"
                    raise NoCharacters(msg)
            return Concat(tuple(self._term(k, child) for k in kids), sep)
        if name in _OPAQUE:
            msg = (
                "it is computed by an opaque user-defined function (a UDF's code is not read: "
                "whole-cell lineage)"
            )
            raise NoCharacters(msg)
        msg = f"`{e.prettyName()}` has no character rule"
        raise NoCharacters(msg)
