"""The package reads as its architecture: no import cycles, no god modules, no giant functions.

Walks the package *as installed* (``dslog_dagster.core`` etc. are resolved by the import system,
whatever maps them), reading every module's source for its imports — module level, inside
functions and under ``if TYPE_CHECKING`` alike, since a cycle hidden there is still a cycle.
"""

import ast
import functools
import importlib.machinery
import importlib.util
from collections.abc import Iterator
from pathlib import Path

ROOT = "dslog_dagster"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120
#: A docstring that explains why its function is long starts a line with this.
LONG_REASON = "Why one function:"


@functools.cache
def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(name)
    except (ModuleNotFoundError, ValueError):  # `from module import function`
        return None


def _source(name: str) -> Path | None:
    spec = _spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None  # compiled extensions and namespace packages
    return Path(spec.origin)


def _children(name: str) -> Iterator[str]:
    spec = _spec(name)
    for loc in (spec.submodule_search_locations or []) if spec else []:
        for p in sorted(Path(loc).iterdir()):
            child = f"{name}.{p.stem}"
            source = p / "__init__.py" if p.is_dir() else p
            if p.suffix in ("", ".py") and p.stem != "__init__" and _source(child) == source:
                yield child


def _imports(name: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if is_pkg else 0)
                base = ".".join([*parts[:keep], *([base] if base else [])])
            # `from pkg import module` runs pkg's __init__ too, but as a parent, not a
            # dependency; `from pkg import name` depends on pkg itself.
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if _spec(sub) is not None else base)
    return {m for m in out if m == ROOT or m.startswith(ROOT + ".")}


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, one name per source file.

    An editable install may list the repository root on ``dslog_dagster.__path__``, so one file
    can be reachable under two names (``dslog_dagster.spark`` and
    ``dslog_dagster.dslog_dagster.spark``); the shortest name stands for the file.
    """
    raw: dict[str, set[str]] = {}
    todo = [ROOT]
    while todo:
        name = todo.pop()
        if name in raw:
            continue
        path = _source(name)
        if path is None:
            continue
        raw[name] = {d for d in _imports(name, path) if _source(d) is not None}
        todo.extend(raw[name])
        todo.extend(_children(name))
    canonical: dict[Path, str] = {}
    for name in sorted(raw, key=lambda n: (n.count("."), n)):
        canonical.setdefault(_source(name), name)  # type: ignore[arg-type]
    return {
        canonical[_source(n)]: {canonical[_source(d)] for d in deps} - {n}  # type: ignore[index]
        for n, deps in raw.items()
        if canonical[_source(n)] == n  # type: ignore[index]
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_every_layer() -> None:
    graph = _graph()
    for layer in ("core", "io_managers", "assets", "spark"):
        assert any(m.startswith(f"{ROOT}.{layer}.") for m in graph), layer
    assert len(graph) > 40


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_over_the_limit() -> None:
    sizes = {m: _source(m).read_text().count("\n") for m in _graph()}  # type: ignore[union-attr]
    assert {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_long_functions_say_why() -> None:
    long: list[str] = []
    for m in _graph():
        tree = ast.parse(_source(m).read_text())  # type: ignore[union-attr]
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION_LINES and LONG_REASON not in (ast.get_docstring(node) or ""):
                    long.append(f"{m}.{node.name} ({n} lines)")
    assert long == []
