"""The import graph of lakepurge/, read from the source with ``ast`` (nothing is imported): the library never
imports its entry points, has no import cycles, and each group imports only the groups below it.

LAYERS is docs/ARCHITECTURE.md's "Module map" as data. The two are kept in sync by hand: change both together.

What counts:

- entry points: any import of ``lakepurge_lambdas`` or ``lakepurge_jobs`` anywhere in a module (module level or inside a
  function) fails; naming one in a string (``lakepurge.workflow.deployment.HANDLERS``, ``launch``'s
  ``find_spec("lakepurge_jobs.purge")``) is how the library refers to them;
- entry points import ``lakepurge``, never each other;
- cycles: module-level imports only. An import inside a function body (run when called, after every module
  has loaded) or under ``if TYPE_CHECKING:`` may close a cycle; that is the sanctioned way to break one. A
  module's implicit import of its parent package (``lakepurge.index.base`` runs ``lakepurge/index/__init__``) is
  not an edge: a package importing its own submodules is normal;
- layering: every import, wherever it is, including inside functions and under TYPE_CHECKING: a late import
  breaks a cycle, not the layering.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lakepurge"
ENTRY_POINTS = ("lakepurge_lambdas", "lakepurge_jobs")

# Group -> the modules in it (a name covers a module and, for a package, everything under it).
GROUPS: dict[str, tuple[str, ...]] = {
    "base": (
        "lakepurge",  # the package's own __init__
        "lakepurge.aws",
        "lakepurge.config",
        "lakepurge.configsource",
        "lakepurge.formats",
        "lakepurge.logs",
        "lakepurge.memory",
        "lakepurge.privacy",
        "lakepurge.progress",
        "lakepurge.s3io",
        "lakepurge.s3uri",
        "lakepurge.sparkutil",
        "lakepurge.table_catalogs",
        "lakepurge.tableformats",
    ),
    "index": ("lakepurge.index",),
    "tables": ("lakepurge.tables",),
    "domain": (
        "lakepurge.indexer",
        "lakepurge.table_backfill",
        "lakepurge.backfill",
        "lakepurge.catalog",
        "lakepurge.coverage",
        "lakepurge.layout",
        "lakepurge.report",
        "lakepurge.returning",
        "lakepurge.runtime",
        "lakepurge.unindexable",
    ),
    "purge": ("lakepurge.purge", "lakepurge.launch", "lakepurge.export"),
    "workflow": ("lakepurge.workflow",),
    "local": ("lakepurge.local",),
    "apps": (
        "lakepurge.cli",
        "lakepurge.history",
        "lakepurge.operations",
        "lakepurge.operations_page",
        "lakepurge.operator_purge",
        "lakepurge.remote",
    ),
}

# Group -> the groups its modules may import (always including itself). Same table as the Module map.
LAYERS: dict[str, set[str]] = {
    "base": {"base"},
    "index": {"base", "index"},
    "tables": {"base", "index", "tables"},
    "domain": {"base", "index", "tables", "domain"},
    "purge": {"base", "index", "tables", "domain", "purge"},
    "workflow": {"base", "index", "tables", "domain", "purge", "workflow"},
    "local": {"base", "index", "tables", "domain", "purge", "workflow", "local"},
    "apps": {"base", "index", "tables", "domain", "purge", "workflow", "local", "apps"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def group_of(module: str) -> str:
    """The group of the longest name in GROUPS that is this module or a package holding it."""
    best = ("", "")
    for group, names in GROUPS.items():
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best[0]):
                best = (name, group)
    if not best[1]:
        raise AssertionError(f"{module} is in no group: add it to GROUPS here and to the Module map")
    return best[1]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str, path: Path) -> Iterator[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import statement in the file. ``from a import b`` is
    ``a.b`` when that is a module of lakepurge, else ``a``; relative imports are resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(nodes: list[ast.stmt] | Iterator[ast.AST], top: bool) -> Iterator[tuple[str, int, bool]]:
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name, node.lineno, top
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    yield (full if full in MODULES else base), node.lineno, top
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from visit(ast.iter_child_nodes(node), False)
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                yield from visit(node.body, False)
                yield from visit(node.orelse, top)
            else:
                yield from visit(ast.iter_child_nodes(node), top)

    yield from visit(ast.parse(path.read_text(encoding="utf-8"), str(path)).body, True)


IMPORTS: dict[str, list[tuple[str, int, bool]]] = {
    module: list(imports(module, path)) for module, path in MODULES.items()
}


def test_the_library_never_imports_its_entry_points() -> None:
    found = [
        f"{MODULES[module].relative_to(ROOT)}:{line} imports {imported}"
        for module, found in IMPORTS.items()
        for imported, line, _ in found
        if imported.split(".")[0] in ENTRY_POINTS
    ]
    assert not found, (
        "lakepurge/ must not import lakepurge_lambdas/ or lakepurge_jobs/ (name them as strings):\n" + "\n".join(found)
    )


def test_entry_points_import_the_library_not_each_other() -> None:
    found = []
    for folder in ENTRY_POINTS:
        for path in sorted((ROOT / folder).glob("*.py")):
            module = module_name(path)
            for imported, line, _ in imports(module, path):
                if imported.split(".")[0] in ENTRY_POINTS:
                    found.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not found, "entry points share code through lakepurge, not through each other:\n" + "\n".join(found)


def test_every_module_has_a_group_and_every_group_a_layer() -> None:
    assert set(GROUPS) == set(LAYERS)
    assert all(group in LAYERS[group] for group in LAYERS)
    assert all(LAYERS[group] <= set(LAYERS) for group in LAYERS)
    for module in MODULES:
        group_of(module)


def test_no_module_imports_upward() -> None:
    found = []
    for module, found_imports in IMPORTS.items():
        group = group_of(module)
        for imported, line, _ in found_imports:
            if imported.split(".")[0] != "lakepurge":
                continue
            target = group_of(imported)
            if target not in LAYERS[group]:
                found.append(f"{MODULES[module].relative_to(ROOT)}:{line} ({group}) imports {imported} ({target})")
    assert not found, "imports against the Module map (docs/ARCHITECTURE.md):\n" + "\n".join(found)


def module_level_graph() -> dict[str, set[str]]:
    return {
        module: {imported for imported, _, top in found if top and imported in MODULES and imported != module}
        for module, found in IMPORTS.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_import_cycles_at_module_level() -> None:
    found = cycles(module_level_graph())
    assert not found, "module-level import cycles (move one import into the function that needs it):\n" + "\n".join(
        " <-> ".join(component) for component in found
    )


def test_the_checks_see_what_they_claim_to() -> None:
    """The parser's own sanity: known edges are found, with the right level, and a cycle is a cycle."""
    edges = {(imported, top) for imported, _, top in IMPORTS["lakepurge.local.workflow"]}
    assert ("lakepurge.workflow.deployment", True) in edges
    assert ("lakepurge.aws", True) in edges  # from lakepurge import aws: the module, not the package
    assert ("lakepurge.index.dynamodb", False) in {(i, t) for i, _, t in IMPORTS["lakepurge.index"]}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert group_of("lakepurge.purge.engine") == "purge"
    assert group_of("lakepurge.workflow.deployment") == "workflow"
