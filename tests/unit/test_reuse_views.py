"""Generalised views (fit / instantiate), signatures and sampled verification, unit level."""

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dslog_dagster.core import capture, compress
from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.reuse.keys import (
    Unsignable,
    arg_token,
    args_token,
    code_identity,
    shape_class,
)
from dslog_dagster.core.reuse.verification import sample_axes, verify_sample
from dslog_dagster.core.reuse.views import fit

RNG = np.random.default_rng(5)


def tables_at(
    func: Callable[..., Any], shapes: list[tuple[int, ...]]
) -> dict[tuple[int, int, int], LineageTable]:
    r = capture(func, *[RNG.random(s) for s in shapes])
    return {(0, o, i): compress(rel) for (o, i), rel in r.relations.items()}


CASES: list[tuple[str, Callable[..., Any], Callable[[int, int], list[tuple[int, ...]]]]] = [
    ("flip", functools.partial(np.flip, axis=0), lambda a, b: [(a, b)]),
    ("tile", functools.partial(np.tile, reps=(2, 3)), lambda a, b: [(a, b)]),
    ("cumsum", functools.partial(np.cumsum, axis=1), lambda a, b: [(a, b)]),
    ("ravel", np.ravel, lambda a, b: [(a, b)]),
    ("kron", np.kron, lambda a, b: [(a,), (b,)]),
    ("matmul", np.matmul, lambda a, b: [(a, b), (b, a + b)]),
    ("concatenate", lambda x, y: np.concatenate((x, y)), lambda a, b: [(a, 3), (b, 3)]),
    ("constant (empty relation)", lambda x: np.full_like(x, 2.0), lambda a, b: [(a, b)]),
]


@pytest.mark.parametrize(("name", "func", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_fitted_template_instantiates_to_the_captured_lineage(
    name: str, func: Callable[..., Any], shapes: Callable[[int, int], list[tuple[int, ...]]]
) -> None:
    train = [(7, 5), (11, 6), (9, 13), (14, 8)]
    obs = []
    for a, b in train:
        ins = shapes(a, b)
        outs = [np.shape(func(*[np.ones(s) for s in ins]))]
        klass = shape_class(ins, outs, {}, 4)
        obs.append((klass.values, tables_at(func, ins)))
    tmpl = fit(obs)
    assert tmpl is not None, name
    for a, b in [(23, 17), (5, 31)]:
        ins = shapes(a, b)
        outs = [np.shape(func(*[np.ones(s) for s in ins]))]
        klass = shape_class(ins, outs, {}, 4)
        assert (
            klass.token
            == shape_class(
                shapes(7, 5), [np.shape(func(*[np.ones(s) for s in shapes(7, 5)]))], {}, 4
            ).token
        )
        inst = tmpl.instantiate(klass.values, ins, outs)
        assert inst is not None
        truth = tables_at(func, ins)
        for key, table in inst.items():
            rel = table.decompress()
            assert rel == truth[key].decompress()
            assert table.n_pairs == rel.n


def test_fit_refuses_differently_structured_observations() -> None:
    ident = tables_at(np.negative, [(6, 5)])
    flipped = tables_at(functools.partial(np.flip, axis=0), [(7, 5)])
    assert fit([((6, 5), ident), ((7, 5), flipped)]) is None


def test_instantiate_rejects_shapes_outside_the_arrays() -> None:
    obs = [((a, b), tables_at(np.negative, [(a, b)])) for a, b in [(5, 6), (7, 9), (11, 8)]]
    tmpl = fit(obs)
    assert tmpl is not None
    assert tmpl.instantiate((10, 12), [(10, 12)], [(10, 12)]) is not None
    assert tmpl.instantiate((10, 12), [(4, 12)], [(10, 12)]) is None  # input too small


def test_shape_class_literals_equalities_and_regimes() -> None:
    a = shape_class([(40, 3), (40, 3)], [(40, 3)], {}, 4)
    b = shape_class([(50, 2), (50, 2)], [(50, 2)], {}, 4)
    assert a.token != b.token  # cross on 3- vs 2-vectors
    assert a.values == (40,)
    assert (
        shape_class([(9, 9)], [(9, 9)], {}, 4).token != shape_class([(9, 8)], [(9, 8)], {}, 4).token
    )
    r1 = shape_class([(30,)], [(30,)], {"shift": 10}, 4)
    r2 = shape_class([(8,)], [(8,)], {"shift": 10}, 4)
    r3 = shape_class([(45,)], [(45,)], {"shift": 10}, 4)
    assert r1.token == r3.token != r2.token


def test_argument_tokens_are_type_exact() -> None:
    assert arg_token(1) != arg_token(True) != arg_token(1.0)
    assert arg_token(0.0) != arg_token(-0.0)
    assert arg_token((1, 2)) != arg_token([1, 2])
    assert arg_token(np.arange(3)) == arg_token(np.arange(3))
    assert arg_token(np.arange(3)) != arg_token(np.arange(3.0))
    assert args_token({"b": 1, "a": 2}) == args_token({"a": 2, "b": 1})
    assert args_token({"a": 1, "tag": 2}, frozenset({"tag"})) == args_token({"a": 1})
    with pytest.raises(Unsignable):
        arg_token(object())


def test_code_identity_sees_defaults_closures_and_helpers() -> None:
    def make(k: float) -> Callable[[Any], Any]:
        return lambda x: x * k

    assert code_identity(make(2.0)) != code_identity(make(3.0))

    def f(x: Any, k: int = 1) -> Any:
        return x * k

    g = f
    before = code_identity(g)
    f.__defaults__ = (2,)
    assert code_identity(g) != before
    assert code_identity(np.sum) == code_identity(np.sum)
    assert code_identity(np.sum) != code_identity(np.prod)


def test_sample_axes_cover_both_ends() -> None:
    axes = sample_axes((50, 1, 7), np.random.default_rng(0))
    assert {0, 1, 48, 49} <= set(axes[0].tolist())
    assert axes[1].tolist() == [0]
    assert {0, 6} <= set(axes[2].tolist())


def test_verify_sample_accepts_the_truth_and_rejects_a_wrong_view() -> None:
    x = RNG.random((12, 9))
    good = tables_at(np.cumsum, [(12, 9)])
    shape = [np.cumsum(x).shape]
    assert verify_sample(np.cumsum, [x], {}, "contributing", good, shape, RNG)
    wrong = tables_at(np.negative, [(12, 9)])
    assert not verify_sample(np.negative, [x], {}, "contributing", good, [(12, 9)], RNG)
    assert not verify_sample(np.cumsum, [x], {}, "contributing", wrong, shape, RNG)
