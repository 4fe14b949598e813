"""The package's layers import only downward, and no module is part of an import circle.

Every import statement of every module is read (inside functions and under ``TYPE_CHECKING``
too): a name imported from a layer above, or a circle of modules, fails the test.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "gym_instrument"

# Bottom to top, in the order a call travels upward through the package.
LAYERS = [
    ("base", {"semconv", "version", "package", "compat", "lines"}),
    ("record", {"record"}),
    ("link", {"link"}),
    ("schema", {"schema"}),
    ("role", {"role"}),
    ("plan", {"plan"}),
    ("target", {"target"}),
    ("frameworks", {"frameworks"}),
    ("config", {"config"}),
    ("top", {"instrumentor", "tools", "__init__", "__main__"}),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    parts = module.split(".")
    first = parts[1] if len(parts) > 1 else "__init__"
    for rank, (_, members) in enumerate(LAYERS):
        if first in members:
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports (a name imported from a package's __init__ counts
    as the submodule when there is one of that name)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("gym_instrument"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gym_instrument"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found


def graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {module: imports_of(path, set(paths)) - {module} for module, path in paths.items()}


def test_every_import_points_downward_or_within_its_layer() -> None:
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {imported} ({LAYERS[layer_of(imported)][0]})"
        for module, imported_modules in graph().items()
        for imported in imported_modules
        if layer_of(imported) > layer_of(module)
    ]
    assert not upward, "\n".join(upward)


def test_no_module_is_part_of_an_import_circle() -> None:
    edges = graph()
    # A package imports its own submodules from its __init__; a submodule importing a sibling goes
    # through the package, which is not a circle of its own: only module -> module edges count.
    circles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(edges.get(module, ())):
            if imported not in edges or imported == module.rpartition(".")[0]:
                continue
            if state.get(imported) == 1:
                circles.append([*path[path.index(imported) :], imported] if imported in path else [module, imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, "\n".join(" -> ".join(circle) for circle in circles)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The walker itself: an import of a higher layer written in a lower one is found."""
    source = tmp_path / "x.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gym_instrument.plan.plan import Plan\n")
    modules = {module_name(path) for path in PACKAGE.rglob("*.py")}
    assert imports_of(source, modules) == {"gym_instrument.plan.plan"}
    assert layer_of("gym_instrument.plan.plan") > layer_of("gym_instrument.record.spans")
