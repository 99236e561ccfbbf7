"""Damage every kind of store file many ways: never a wrong answer, and damage stays local.

A store with three independent chains is built once: one whose operations live in a pack
(compaction), one registered with its outputs (so each output's array record is a hard link
of the operation's segment) and one registered the long way (JSON array records). Then, for
every file kind — operation segment (one with a character table), pack, JSON array record,
linked array segment (``.op.parquet``), ``.store-id`` and ``catalog.duckdb`` — a fresh copy
is damaged by bit flips at offsets spread over the whole file, truncations, zero fills and
garbage, and every query (a character query too) and listing is asked again. Each answer
must equal the undamaged store's or be a :class:`LineageStorageError`
(``LineageCorruptError`` for damage) naming the damaged file; queries and listings of chains
the file does not hold must still answer, and equal.
"""

import contextlib
import io
import os
import random
import shutil
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dslog_dagster.cli import main
from dslog_dagster.core import LineageRelation
from dslog_dagster.core.api import DSLog
from dslog_dagster.core.character_trace import trace_character_range
from dslog_dagster.core.characters import CharacterLineage, CharacterTable
from dslog_dagster.core.compression import compress
from dslog_dagster.core.store import LineageStore, NewArray
from dslog_dagster.errors import DamagedStoreWarning, LineageStorageError

STRINGS = [(f"s{i}", "string") for i in range(5)]
SEED = 2026
FLIPS_PER_FILE = 6
CLI_EVERY = 6


def _relation(out_shape: tuple[int, ...], in_shape: tuple[int, ...], perm: Any) -> Any:
    """Each output cell from one input cell: ``perm`` maps flat output to flat input index."""
    flat_out = np.arange(int(np.prod(out_shape)))
    flat_in = np.asarray(perm(flat_out)) % int(np.prod(in_shape))
    return LineageRelation.from_columns(
        out_shape,
        in_shape,
        out_cols=list(np.unravel_index(flat_out, out_shape)),
        in_cols=list(np.unravel_index(flat_in, in_shape)),
    )


# query name -> (path, cells of the first array); chain -> its queries
QUERIES: dict[str, tuple[list[str], Any]] = {
    "pack: n <- m": (["n", "m"], np.s_[0:2, 1:3]),
    "pack: o <- n <- m": (["o", "n", "m"], np.s_[1, :]),
    "pack: v <- w": (["v", "w"], np.s_[2:5]),
    "links: b <- a": (["b", "a"], np.s_[5, 4]),
    "links: c <- b <- a": (["c", "b", "a"], np.s_[0:3, 0:2]),
    "json: q <- p": (["q", "p"], np.s_[1:7]),
}
BETWEEN = {"links: between c, a": ("c", "a", np.s_[4, 0:5]), "pack: between o, m": ("o", "m", 5)}


def _build(root: Path) -> None:
    store = LineageStore(root)
    # chain "pack": packed by compaction
    for name, shape in (("m", (3, 4)), ("n", (3, 4)), ("o", (4, 3)), ("w", (9,)), ("v", (9,))):
        store.register_array(name, shape)
    store.register_operation(
        "roll", ["m"], ["n"], {("n", "m"): _relation((3, 4), (3, 4), lambda f: f + 5)}
    )
    store.register_operation(
        "t", ["n"], ["o"], {("o", "n"): _relation((4, 3), (3, 4), lambda f: 11 - f)}
    )
    store.register_operation(
        "rev", ["w"], ["v"], {("v", "w"): _relation((9,), (9,), lambda f: 8 - f)}
    )
    assert store.compact().operations == 3
    # chain "links": outputs registered with their operation (hard-linked segments)
    store.register_array("a", (6, 5))
    store.register_operation(
        "shift",
        ["a"],
        [NewArray("b", (6, 5), version="r1", columns=STRINGS)],
        {("b", "a"): _relation((6, 5), (6, 5), lambda f: f + 7)},
    )
    # with a character table (stored after the cell table in the same segment):
    # characters (r, k) of c.s1 <- (r, 7 - k) of b.s3 (a reversed string)
    chars = _relation((6, 8), (6, 8), lambda f: (f // 8) * 8 + 7 - f % 8)
    store.register_operation(
        "flip",
        ["b"],
        [NewArray("c", (6, 5), version="r1", columns=STRINGS)],
        {("c", "b"): _relation((6, 5), (6, 5), lambda f: 29 - f)},
        characters={"c": CharacterLineage((CharacterTable("s1", "b", "s3", compress(chars)),))},
    )
    # chain "json": JSON array records
    store.register_array("p", (8,))
    store.register_array("q", (8,))
    store.register_operation("neg", ["p"], ["q"], {("q", "p"): _relation((8,), (8,), lambda f: f)})
    store.operations()  # the catalog indexes everything, as a used store's has


@dataclass(frozen=True)
class Answers:
    queries: dict[str, Any]
    ops: dict[str, Any]  # op id -> record
    op_chain: dict[str, str]
    arrays: dict[tuple[str, str | None], Any]


def _chain_of_array(name: str) -> str:
    return "pack" if name in "mnowv" else "links" if name in "abc" else "json"


def _ask(root: Path, store: Callable[[], LineageStore]) -> Iterator[tuple[str, Callable[[], Any]]]:
    """Every question, by name: its chain is the name's prefix."""
    holder: dict[str, Any] = {}

    def log() -> DSLog:
        if "log" not in holder:
            holder["log"] = DSLog(store())
        return holder["log"]  # type: ignore[no-any-return]

    for name, (path, cells) in QUERIES.items():
        yield name, lambda p=path, c=cells: sorted(log().prov_query(p, c).to_flat().tolist())
    yield (
        "links: characters of c",
        lambda: [
            (r.input, r.column, r.row, r.start, r.stop, r.whole)
            for r in trace_character_range(
                store(), store().get_array("c", "r1"), 2, "s1", 1, 5
            ).ranges
        ],
    )
    for name, (src, dst, cells) in BETWEEN.items():
        yield (
            name,
            lambda s=src, d=dst, c=cells: sorted(log().lineage_between(s, d, c).to_flat().tolist()),
        )


def _listings(store: LineageStore) -> tuple[dict[str, Any], dict[tuple[str, str | None], Any]]:
    ops = {op.op_id: op for op in store.operations()}
    arrays = {(a.name, a.version): a for a in store.arrays()}
    return ops, arrays


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Answers]:
    root = tmp_path_factory.mktemp("template") / "store"
    _build(root)
    queries = {name: ask() for name, ask in _ask(root, lambda: LineageStore(root))}
    ops, arrays = _listings(LineageStore(root))
    op_chain = {op_id: _chain_of_array(op.outputs[0].name) for op_id, op in ops.items()}
    assert (len(ops), len(arrays)) == (6, 10)
    return root, Answers(queries, ops, op_chain, arrays)


def _copy(src: Path, dst: Path) -> None:
    """Copy a store over ``dst`` keeping its hard links (a linked array record shares its
    segment's bytes: damage to one is damage to both, as on a real disk). Files of ``dst``
    are replaced, its directories kept (removing directories is slow on some file systems)."""
    for dirpath, _, names in os.walk(dst):
        for n in names:
            os.unlink(Path(dirpath) / n)
    for sub in ("quarantine",):
        shutil.rmtree(dst / sub, ignore_errors=True)
    seen: dict[tuple[int, int], Path] = {}
    for dirpath, _, names in os.walk(src):
        for n in names:
            s = Path(dirpath) / n
            d = dst / s.relative_to(src)
            d.parent.mkdir(parents=True, exist_ok=True)
            st = s.stat()
            key = (st.st_dev, st.st_ino)
            if key in seen:
                os.link(seen[key], d)
            else:
                shutil.copy2(s, d)
                seen[key] = d


def _file_kinds(root: Path) -> dict[str, Path]:
    """One file of each kind, found by listing the store (relative to ``root``)."""
    rel = lambda p: p.relative_to(root)  # noqa: E731
    packs = sorted((root / "packs").glob("*.parquet"))
    store = LineageStore(root)
    a_op = next(op for op in store.operations() if op.op_name == "flip")
    links = [p for p in (root / "arrays").rglob("*.op.parquet")]
    jsons = [p for p in (root / "arrays").rglob("*.json") if store.array_files.load(p).name == "q"]
    assert (len(packs), len(links), len(jsons)) == (1, 2, 1)
    link_b = next(p for p in links if store.array_files.load(p).name == "b")
    return {
        "operation segment": rel(root / "operations" / f"{a_op.op_id}.parquet"),
        "pack": rel(packs[0]),
        "array record": rel(jsons[0]),
        "linked array segment": rel(link_b),
        "store id": Path(".store-id"),
        "catalog": Path("catalog.duckdb"),
    }


# what each file holds: chains whose answers it may change
HOLDS = {
    "operation segment": {"links"},
    "pack": {"pack"},
    "array record": {"json"},
    "linked array segment": {"links"},  # the segment of `shift` (the same bytes)
    "store id": set(),
    "catalog": set(),
}


def _damages(size: int, rng: random.Random) -> list[tuple[str, Callable[[bytearray], bytearray]]]:
    """Bit flips at offsets spread over header, body and footer; truncations; zero fills;
    garbage appended and replacing a range."""
    out: list[tuple[str, Callable[[bytearray], bytearray]]] = []
    offsets = {0, 1, size - 1, size - 5, size - 9}
    while len(offsets) < min(FLIPS_PER_FILE, size):
        third = rng.randrange(3)  # even spread over the head, the middle and the tail
        lo, hi = third * size // 3, (third + 1) * size // 3
        offsets.add(rng.randrange(lo, max(hi, lo + 1)))
    for off in sorted(o for o in offsets if 0 <= o < size):
        bit = rng.randrange(8)

        def flip(b: bytearray, off: int = off, bit: int = bit) -> bytearray:
            b[off] ^= 1 << bit
            return b

        out.append((f"flip bit {bit} at {off}", flip))
    for cut in sorted({0, 1, size // 2, size - 1, rng.randrange(size)}):
        out.append((f"truncate to {cut}", lambda b, cut=cut: b[:cut]))
    for _ in range(2):
        start = rng.randrange(size)
        n = rng.randrange(1, 64)

        def zero(b: bytearray, start: int = start, n: int = n) -> bytearray:
            b[start : start + n] = bytes(len(b[start : start + n]))
            return b

        out.append((f"zero {n} bytes at {start}", zero))
    junk = bytes(rng.randrange(256) for _ in range(48))
    out.append(("append garbage", lambda b: b + junk))
    start = rng.randrange(size)
    out.append(
        (f"garbage at {start}", lambda b, s=start: b[:s] + junk[: len(b) - s] + b[s + len(junk) :])
    )
    return out


def _names_of(root: Path, rel: Path) -> set[str]:
    """Every path of the damaged file (hard links included), as messages may name it."""
    ino = (root / rel).stat().st_ino if (root / rel).exists() else None
    out = {str(rel), rel.name}
    if ino is not None:
        for p in root.rglob("*"):
            if p.is_file() and p.stat().st_ino == ino:
                out |= {str(p.relative_to(root)), p.name}
    return out


def _check_case(root: Path, kind: str, rel: Path, what: str, expect: Answers, *, cli: bool) -> None:
    """Every query, the listings, and (``cli``) SQL and ``dslog inspect`` on damaged ``root``."""
    names = _names_of(root, rel)
    held = HOLDS[kind]
    handle: list[LineageStore] = []

    def store() -> LineageStore:  # one handle per case (as a process would hold)
        if not handle:
            handle.append(LineageStore(root))
        return handle[0]

    def named(e: BaseException) -> bool:
        return any(n in str(e) for n in names)

    def outcome(ask: Callable[[], Any]) -> tuple[str, Any]:
        try:
            return "ok", ask()
        except LineageStorageError as e:
            error = e
        assert named(error), f"{kind}, {what}: error does not name the file: {error}"
        return "error", error

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, ask in _ask(root, store):
            status, got = outcome(ask)
            chain = name.split(":")[0]
            if status == "ok":
                assert got == expect.queries[name], f"{kind}, {what}: WRONG answer to {name}"
            else:
                assert chain in held, f"{kind}, {what}: unrelated query {name} failed: {got}"
        status, got = outcome(lambda: _listings(store()))
        if status == "ok":
            ops, arrays = got
            for op_id, rec in ops.items():
                assert expect.ops.get(op_id) == rec, f"{kind}, {what}: wrong record {op_id}"
            for key, rec in arrays.items():
                assert expect.arrays.get(key) == rec, f"{kind}, {what}: wrong array {key}"
            lost_ops = {expect.op_chain[o] for o in expect.ops if o not in ops}
            lost_arrays = {_chain_of_array(k[0]) for k in expect.arrays if k not in arrays}
            assert lost_ops <= held, f"{kind}, {what}: lost operations of {lost_ops}"
            assert lost_arrays <= held, f"{kind}, {what}: lost arrays of {lost_arrays}"
        else:
            assert kind == "store id", f"{kind}, {what}: listing failed: {got}"
        if cli:
            _check_cli(root, kind, what, expect)
    for w in caught:  # only our own warnings, naming what they skipped
        assert issubclass(w.category, DamagedStoreWarning), f"{kind}, {what}: {w.message}"


def _check_cli(root: Path, kind: str, what: str, expect: Answers) -> None:
    with contextlib.suppress(LineageStorageError):
        ids = LineageStore(root).sql("SELECT op_id FROM operations").column(0).to_pylist()
        assert set(ids) <= set(expect.ops)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["inspect", str(root)])
    assert rc == 0 or (rc == 2 and kind == "store id" and ".store-id" in err.getvalue()), (
        f"{kind}, {what}: dslog inspect exit {rc}: {err.getvalue()}"
    )


@pytest.mark.parametrize(
    "kind",
    ["operation segment", "pack", "array record", "linked array segment", "store id", "catalog"],
)
def test_damage_is_detected_or_harmless(
    kind: str, template: tuple[Path, Answers], tmp_path: Path
) -> None:
    src, expect = template
    rel = _file_kinds(src)[kind]
    original = (src / rel).read_bytes()
    rng = random.Random(f"{SEED}-{kind}")
    cases = _damages(len(original), rng)
    assert len(cases) >= FLIPS_PER_FILE
    root = tmp_path / "case"
    for i, (what, damage) in enumerate(cases):
        _copy(src, root)
        data = damage(bytearray(original))
        with open(root / rel, "r+b") as f:  # in place: hard links see it too
            f.write(data)
            f.truncate(len(data))
        # SQL and `dslog inspect` open the catalog twice more: on a sample of the cases
        every = 2 if kind == "catalog" else CLI_EVERY
        _check_case(root, kind, rel, what, expect, cli=i % every == 0)
