"""The library's import graph has no circle, imports inside functions included (a circle hidden
behind a function-level import is still a circle: it only moves the failure to run time)."""
from __future__ import annotations

import ast

from specdec import paths

LIB = paths.ROOT / "lib"


def _modules() -> dict[str, tuple[ast.Module, bool]]:
    found = {}
    for f in sorted((LIB / "specdec").rglob("*.py")):
        parts = list(f.relative_to(LIB).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = (ast.parse(f.read_text()), is_package)
    return found


def _is_main_guard(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _nodes(tree: ast.Module):
    """Every node, except under ``if __name__ == "__main__":`` (run as a script the module is
    ``__main__``, not itself, so what it imports there closes no circle)."""
    todo = [n for n in tree.body if not _is_main_guard(n)]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    """``{module: modules of specdec it imports}``. Importing ``a.b.c`` runs ``a.b``'s
    ``__init__`` too, so the packages on the way count; a module's own enclosing packages do not
    (they are already being imported when it runs)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (tree, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        targets: set[str] = set()
        for node in _nodes(tree):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(here[:len(here) - node.level + 1]
                                    + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets.add(base)
                targets |= {f"{base}.{a.name}" for a in node.names}
        deps = set()
        for t in targets:
            parts = t.split(".")
            for i in range(2, len(parts) + 1):
                m = ".".join(parts[:i])
                if m in modules and m != name and not name.startswith(m + "."):
                    deps.add(m)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_scanner_finds_a_planted_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_sees_imports_inside_functions_and_packages():
    graph = import_graph()
    assert "specdec.claims.checkio" in graph["specdec.validate"]
    assert "specdec.claims" in graph["specdec.validate"]  # the package's __init__ runs first
    assert "specdec.metrics" in graph["specdec.claims.derive"]  # imported inside summary()


def test_no_import_circle_in_the_library():
    assert circles(import_graph()) == []


def test_every_module_has_its_place_in_the_layer_map():
    """``specdec.LAYERS`` is the architecture a newcomer reads first: a module missing from it,
    or an entry naming a module that no longer exists, makes the map lie."""
    import specdec

    listed = [m for layer in specdec.LAYERS.values() for m in layer]
    assert len(listed) == len(set(listed)), "a module is listed in two layers"
    on_disk = {p.stem for p in (LIB / "specdec").glob("*.py") if p.stem != "__init__"}
    on_disk |= {p.parent.name for p in (LIB / "specdec").glob("*/__init__.py")}
    assert on_disk - set(listed) == set(), "modules missing from specdec.LAYERS"
    assert set(listed) - on_disk == set(), "specdec.LAYERS names modules that do not exist"
