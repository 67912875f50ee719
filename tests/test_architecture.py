"""The code map's rules, checked on the imports of ``rivulet/``.

- Layers: imports point downward only (``server``, ``cli``, ``dbapi`` -> ``engine`` ->
  ``sql`` -> ``meta`` -> ``stream`` -> ``storage`` -> ``common``).
- No import cycles between modules, counting imports inside functions (a cycle hidden by
  a late import is still one).
- Executors are the stream layer's own: other layers use ``rivulet.stream`` modules
  (plans, layouts, the runtime), never ``rivulet.stream.executors.*``.

Imports under ``if TYPE_CHECKING:`` exist for annotations only. They obey the layers too,
and the cycles they close are listed in ``ANNOTATION_CYCLES``: a list that may only
shrink (a new one fails, and so does an entry that no longer is a cycle).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "rivulet"

LAYERS = {
    "common": 0,
    "storage": 1,
    "stream": 2,
    "meta": 3,
    "sql": 4,
    "engine": 5,
    "server": 6,
    "cli": 6,
    "dbapi": 6,
    "__main__": 7,
}

# Cycles closed only by annotation imports, each as its sorted modules.
ANNOTATION_CYCLES: set[tuple[str, ...]] = set()


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    annotation_only: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _annotation_nodes(tree: ast.Module) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt))
    return inside


def _imports(modules: dict[str, Path]) -> list[Import]:
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        annotation = _annotation_nodes(tree)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                # ``from package import module`` imports the module.
                targets = [
                    f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module
                    for a in node.names
                ]
            for target in dict.fromkeys(targets):
                if target.startswith("rivulet") and target != name and target in modules:
                    found.append(Import(name, target, node.lineno, id(node) in annotation))
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def _cycles(imports: list[Import]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set()).add(imp.target)
        graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return _imports(_modules())


def _shown(imports: list[Import], members: tuple[str, ...]) -> str:
    inside = set(members)
    return "\n".join(
        f"  {i.source}:{i.line} -> {i.target}"
        for i in imports
        if i.source in inside and i.target in inside
    )


def test_imports_point_downward(imports: list[Import]) -> None:
    upward = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in imports
        if (a := _layer(i.source)) is not None and (b := _layer(i.target)) is not None and b > a
    ]
    assert not upward, "imports pointing up the layers:\n" + "\n".join(upward)


def test_executors_are_imported_only_by_the_stream_layer(imports: list[Import]) -> None:
    outside = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in imports
        if i.target.startswith("rivulet.stream.executors")
        and not i.source.startswith("rivulet.stream")
    ]
    assert not outside, "executors imported from outside stream/:\n" + "\n".join(outside)


def test_no_import_cycles(imports: list[Import]) -> None:
    runtime = [i for i in imports if not i.annotation_only]
    cycles = _cycles(runtime)
    assert not cycles, "import cycles:\n" + "\n\n".join(_shown(runtime, c) for c in cycles)


def test_annotation_cycles_only_shrink(imports: list[Import]) -> None:
    cycles = set(_cycles(imports))
    new = cycles - ANNOTATION_CYCLES
    assert not new, "new cycles through annotation imports:\n" + "\n\n".join(
        _shown(imports, c) for c in sorted(new)
    )
    gone = ANNOTATION_CYCLES - cycles
    assert not gone, f"no longer cycles; remove them from ANNOTATION_CYCLES: {sorted(gone)}"


def test_the_checks_see_cycles_and_layers() -> None:
    """The rules above would catch what they forbid (a check that finds nothing proves
    nothing if it cannot find anything)."""
    fake = [
        Import("rivulet.sql.a", "rivulet.sql.b", 1, False),
        Import("rivulet.sql.b", "rivulet.sql.a", 9, False),
        Import("rivulet.storage.x", "rivulet.meta.y", 3, False),
    ]
    assert _cycles(fake) == [("rivulet.sql.a", "rivulet.sql.b")]
    assert _layer("rivulet.storage.x") < _layer("rivulet.meta.y")  # type: ignore[operator]
    found = {i.source for i in _imports(_modules())}
    assert "rivulet.sql.session" in found and "rivulet.engine" in found
