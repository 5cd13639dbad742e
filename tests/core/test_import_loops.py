"""No import loop between fedgame's modules: every ``import`` of a fedgame module (at module level
or inside a function; ``if TYPE_CHECKING:`` blocks aside) is an edge, and the graph's strongly
connected components must be single modules. The one loop left is listed below with what removes
it; any other fails the test (the worker pool's loop with JDP-FL, ``sim/pool`` ↔ ``sim/jdp``, is
gone: the pool runs task functions handed to it)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "fedgame"

#: loops known and not yet removed → what removes them (an entry is dropped once its loop is gone)
KNOWN: dict[frozenset[str], str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for p in SRC.rglob("*.py"):
        parts = p.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def import_graph() -> dict[str, set[str]]:
    """Module → the fedgame modules it imports (a name imported from a package counts as its
    submodule where one exists, else as the package)."""
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        tree = ast.parse(p.read_text())
        typing_only = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                if t.startswith("fedgame"):
                    r = resolve(t)
                    if r is not None and r != m:
                        graph[m].add(r)
    return graph


def loops(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_no_import_loop_but_the_known_one() -> None:
    found = loops(import_graph())
    new = [sorted(c) for c in found if c not in KNOWN]
    assert not new, f"import loop(s) between modules: {new}"
    gone = [sorted(k) for k in KNOWN if k not in found]
    assert not gone, f"a known loop is gone: drop it from KNOWN: {gone}"


def test_the_detector_finds_a_loop() -> None:
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]
    assert loops({"a": {"b"}, "b": set()}) == []
