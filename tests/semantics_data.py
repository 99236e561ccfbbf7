"""The data of the semantics-table tests, one copy for every engine
(``tests/spark/test_semantics_table.py``, ``tests/pandas/test_semantics_table.py``)."""

# id, k, v, p: group 0 = {0, 1, 5}, max 5.0 at 1; group 1 = {2, 3}, max 5.0 tied at 2 and 3;
# group 2 = {4}; p is the pivot column (group 2 has no "b")
FACTS = [
    (0, 0, 3.0, "a"),
    (1, 0, 5.0, "b"),
    (2, 1, 5.0, "a"),
    (3, 1, 5.0, "b"),
    (4, 2, 1.0, "a"),
    (5, 0, 1.0, "a"),
]
# j, k, w: keys 0 and 1 match, 3 matches nothing; fact key 2 has no dim
DIMS = [(0, 0, 0.0), (1, 1, 10.0), (2, 3, 30.0)]
