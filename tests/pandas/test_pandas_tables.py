"""How a pandas capture stores its tables: one row table per distinct row map, and the
columnar encoding where rows are drawn at random (never larger than the pairs)."""

import numpy as np
import pandas as pd

from dslog_dagster.core.format.blob import table_to_blob
from dslog_dagster.pandas import capture_pandas


def _frames(shuffled: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(3)
    rows = 3000
    key = np.arange(rows) // 10
    if shuffled:
        key = rng.permutation(key)
    facts = pd.DataFrame({"key": key, "a": rng.random(rows), "b": rng.random(rows)})
    dims = pd.DataFrame({"key": np.arange(rows // 10), "w": rng.random(rows // 10)})
    return facts, dims


def _pipeline(facts: pd.DataFrame, dims: pd.DataFrame) -> pd.DataFrame:
    j = facts.merge(dims, on="key")
    j = j.assign(aw=j["a"] * j["w"])
    return j.groupby("key", as_index=False).agg(s=("aw", "sum"), m=("b", "sum"))


def _reference_pairs(facts: pd.DataFrame, out: pd.DataFrame) -> set[tuple[int, int]]:
    pos = np.searchsorted(out["key"].to_numpy(), facts["key"].to_numpy())
    return {(int(o), int(r)) for r, o in enumerate(pos)}


def test_columns_moved_together_share_one_row_table() -> None:
    for shuffled in (False, True):
        facts, dims = _frames(shuffled)
        cap = capture_pandas(_pipeline, {"facts": facts, "dims": dims})[0]
        table = cap.contributing["facts"]
        # key, s and m come from the same fact rows of each group (sums: every member row),
        # so one row table with three column pairs: key <- key, s <- a, m <- b
        assert len(table.factors) == 1
        rows, cols = table.factors[0]
        assert sorted(map(tuple, cols.decompress().pairs().tolist())) == [(0, 0), (1, 1), (2, 2)]
        assert rows.encoding == ("columnar" if shuffled else "provrc")
        rel = cap.relation("facts")
        got = {(int(o), int(r)) for o, r in zip(rel.out_cols[0], rel.in_cols[0], strict=True)}
        assert got == _reference_pairs(facts, cap.frame)


def test_shuffled_keys_are_stored_no_larger_than_their_pairs() -> None:
    facts, dims = _frames(True)
    cap = capture_pandas(_pipeline, {"facts": facts, "dims": dims})[0]
    rows, _ = cap.contributing["facts"].factors[0]
    assert rows.encoding == "columnar"
    n_pairs = len(facts)
    # two int64 columns of pairs, uncompressed, as an upper bound
    assert len(table_to_blob(cap.contributing["facts"])) < 16 * n_pairs
