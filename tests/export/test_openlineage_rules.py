"""The transformation types and subtypes of the columnLineage facet, rule by rule
(:mod:`dslog_dagster.export.openlineage_facet`), on small hand-made relations and effects."""

from dslog_dagster.core.relation import LineageRelation as Relation
from dslog_dagster.core.store.effects import OperationEffects, step
from dslog_dagster.export.openlineage_facet import FieldMap, edges, indirect_subtype


def _rel(
    out: tuple[int, int], inp: tuple[int, int], pairs: list[tuple[tuple[int, int], tuple[int, int]]]
) -> Relation:
    return Relation.from_pairs(out, inp, [o for o, _ in pairs], [i for _, i in pairs])


def _effects(*steps: tuple[str, tuple[str, ...]]) -> OperationEffects:
    return OperationEffects(tuple(step(call, kinds) for call, kinds in steps))


def test_indirect_subtype_is_the_one_subtype_the_steps_name() -> None:
    cases = {
        (("DataFrame.merge", ("join",)),): "JOIN",
        (("DataFrameGroupBy.sum", ("instance_generation",)),): "GROUP_BY",
        (
            ("DataFrame.sort_values", ("space_transformation",)),
            ("DataFrame.head", ("instance_drop",)),
        ): None,
        (("DataFrame.nlargest", ("instance_drop",)),): "SORT",
        (("spark.orderBy", ("space_transformation",)),): "SORT",
        (("Rolling.sum", ("value_transformation",)),): "WINDOW",
        (("DataFrame.where", ("value_transformation",)),): "CONDITIONAL",
        (
            ("DataFrame.query", ("instance_drop",)),
            ("DataFrame.dropna", ("instance_drop",)),
        ): "FILTER",
        (("DataFrame.fillna", ("imputation",)),): None,  # no step says how a cell was decided
        (("pandas.merge", ("join",)), ("DataFrameGroupBy.sum", ("instance_generation",))): None,
    }  # fmt: skip
    for steps, want in cases.items():
        assert indirect_subtype(_effects(*steps)) == want, steps
    assert indirect_subtype(None) is None


def test_direct_subtypes_follow_the_contributing_relation_and_the_effects() -> None:
    # out (3 rows: a, b, total) <- in (3 rows: a, b); a copied, b doubled, total = a + b
    out = FieldMap(("a", "b", "total"), True)
    inp = FieldMap(("a", "b"), True)
    rel = _rel(
        (3, 3),
        (3, 2),
        [((r, 0), (r, 0)) for r in range(3)]
        + [((r, 1), (r, 1)) for r in range(3)]
        + [((r, 2), (r, c)) for r in range(3) for c in (0, 1)],
    )
    eff = OperationEffects(
        (
            step("DataFrame.__setitem__", ["feature_augmentation"], added=["total"]),
            step("DataFrame.assign", ["value_transformation"], transformed=["b"]),
        )
    )
    got = edges(out, {"src": inp}, {"src": rel}, considered=False, direct=None, effects=eff)
    assert [(e.field, e.type, e.subtype) for e in got["a"]] == [("a", "DIRECT", "IDENTITY")]
    assert [(e.field, e.subtype) for e in got["b"]] == [("b", "TRANSFORMATION")]
    # total reads one a and one b cell per output cell: computed, not aggregated
    assert [(e.field, e.subtype) for e in got["total"]] == [
        ("a", "TRANSFORMATION"),
        ("b", "TRANSFORMATION"),
    ]
    # a column sum: one output cell from every row -> AGGREGATION; unknown effects never IDENTITY
    col_sum = _rel((1, 1), (3, 2), [((0, 0), (r, 0)) for r in range(3)])
    got = edges(
        FieldMap(("a",), True), {"src": inp}, {"src": col_sum},
        considered=False, direct=None, effects=None,
    )  # fmt: skip
    assert [(e.field, e.subtype) for e in got["a"]] == [("a", "AGGREGATION")]
    copy = _rel((3, 1), (3, 2), [((r, 0), (r, 0)) for r in range(3)])
    got = edges(
        FieldMap(("a",), True), {"src": inp}, {"src": copy},
        considered=False, direct=None, effects=None,
    )  # fmt: skip
    assert [(e.field, e.subtype) for e in got["a"]] == [("a", "TRANSFORMATION")]


def test_a_group_aggregate_is_an_aggregation_even_when_it_passes_one_cell() -> None:
    # out (2 groups: k, best) <- in (4 rows: k, v); best = the group's max (the semantics
    # table: contributed by the one picked cell), k = the group's key (one key row each here)
    inp = FieldMap(("k", "v"), True)
    rel = _rel((2, 2), (4, 2), [((0, 0), (0, 0)), ((1, 0), (2, 0)), ((0, 1), (1, 1)), ((1, 1), (3, 1))])  # fmt: skip  # noqa: E501
    eff = OperationEffects(
        (step("spark.Aggregate", ["instance_generation"], added=["best"], removed=["v"]),)
    )
    got = edges(
        FieldMap(("k", "best"), True), {"src": inp}, {"src": rel},
        considered=False, direct=None, effects=eff,
    )  # fmt: skip
    assert [(e.field, e.subtype) for e in got["best"]] == [("v", "AGGREGATION")]
    assert [(e.field, e.subtype) for e in got["k"]] == [("k", "IDENTITY")]
