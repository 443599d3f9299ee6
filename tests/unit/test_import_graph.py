"""The import graph of lakepurge/, read from the source with ``ast`` (nothing is imported): the library never
imports its entry points, has no import cycles, and each layer imports only the layers below it.

A module's layer is its folder under ``lakepurge/`` (``lakepurge/purge/engine.py`` is in ``purge``); LAYERS lists the
folders bottom-up, which is docs/ARCHITECTURE.md's module map. The package's two root modules (its ``__init__`` and
``runtime``) sit at the layer ROOT_MODULES names. A module in a folder LAYERS does not know fails the test: a new
folder is a new layer, placed in this list and in the module map on purpose.

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

# The folders of lakepurge/, bottom-up: a module may import modules of its own layer and of the layers before it.
LAYERS: tuple[str, ...] = (
    "records",  # reading records out of bytes
    "core",  # settings, AWS, S3 primitives, logging, keyed hashes, progress, Spark plumbing
    "index",  # the IndexStore interface and its backends
    "tables",  # table formats: reading a table's log, files and history
    "indexing",  # keeping the index current, and how far it can be trusted
    "protection",  # pseudonymised datasets: the key vault, the write and read sides, crypto-shredding
    "reports",  # the report and the evidence bucket's layout
    "purge",  # the erasure, its job and the vacuum
    "access",  # access requests (Art. 15)
    "workflow",  # requests, approval, one function per Task
    "local",  # the local stack and the demo
    "ops",  # what an operator runs and reads
    "cli",  # the command line
)
# The package's root modules and the layer each sits at.
ROOT_MODULES: dict[str, str] = {"lakepurge": "records", "lakepurge.runtime": "index"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str:
    """The folder a module is in (its layer), or the layer ROOT_MODULES gives a root module."""
    if module in ROOT_MODULES:
        return ROOT_MODULES[module]
    folder = module.split(".")[1]
    if folder not in LAYERS:
        raise AssertionError(
            f"{module} is in no layer: put it in one of the folders {', '.join(LAYERS)}, or add its folder to LAYERS"
            " here and to the module map (docs/ARCHITECTURE.md) at its place"
        )
    return folder


def may_import(importer: str, imported: str) -> bool:
    return LAYERS.index(layer_of(imported)) <= LAYERS.index(layer_of(importer))


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


def test_every_module_is_in_a_layer() -> None:
    assert set(ROOT_MODULES.values()) <= set(LAYERS)
    for module in MODULES:
        layer_of(module)
    for folder in PACKAGE.iterdir():
        if folder.is_dir() and (folder / "__init__.py").exists():
            assert folder.name in LAYERS, f"lakepurge/{folder.name}/ is no layer of the module map"


def upward_imports(imports: dict[str, list[tuple[str, int, bool]]]) -> list[str]:
    return [
        f"{MODULES[module].relative_to(ROOT) if module in MODULES else module}:{line} ({layer_of(module)}) imports"
        f" {imported} ({layer_of(imported)})"
        for module, found_imports in imports.items()
        for imported, line, _ in found_imports
        if imported.split(".")[0] == "lakepurge" and not may_import(module, imported)
    ]


def test_no_module_imports_upward() -> None:
    found = upward_imports(IMPORTS)
    assert not found, "imports against the module map (docs/ARCHITECTURE.md):\n" + "\n".join(found)


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
    assert ("lakepurge.core.aws", True) in edges  # from lakepurge import aws: the module, not the package
    assert ("lakepurge.index.dynamodb", False) in {(i, t) for i, _, t in IMPORTS["lakepurge.index"]}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("lakepurge.purge.engine") == "purge"
    assert layer_of("lakepurge.workflow.deployment") == "workflow"
    assert layer_of("lakepurge.runtime") == "index"


def test_given_a_planted_upward_import_a_cycle_or_a_stray_module_then_the_checks_fail() -> None:
    """What the checks above would say of a tree with these faults (planted in data, the tree stays as it is)."""
    planted = {"lakepurge.core.config": [("lakepurge.purge.engine", 1, True)]}  # core reaching up into purge
    assert upward_imports(planted) == ["lakepurge/core/config.py:1 (core) imports lakepurge.purge.engine (purge)"]
    graph = module_level_graph()
    graph["lakepurge.core.s3uri"] = {"lakepurge.core.config"}  # config imports s3uri: now a cycle
    assert ["lakepurge.core.config", "lakepurge.core.s3uri"] in cycles(graph)
    with pytest.raises(AssertionError, match="is in no layer"):
        layer_of("lakepurge.helpers.misc")  # a module outside the known folders
