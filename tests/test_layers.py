"""The layers of ARCHITECTURE.md, enforced from the code's own imports.

Every import counts, the ones inside functions too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dragon_dsl", "codegen", "training")

# Within codegen and training, a module may import its own sub-package, the layers below it,
# and (for training) anything in codegen; never a layer above.  Top-level modules of a package
# are their own layer.
LAYERS = {
    "codegen": ["codegen.targets", "codegen.workloads", "codegen.apply", "codegen.measure",
                "codegen.search", "codegen.measured", "codegen.bench", "codegen.model_build",
                "codegen.cli"],
    "training": ["training.prompts", "training.grammars", "training.models", "training.sampling",
                 "training.optimize", "training.datagen", "training.train", "training.evaluate",
                 "training.cli"],
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The project modules (or external top-level packages) ``name`` imports."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:  # `from . import x` may name a module
                candidate = f"{module}.{alias.name}"
                out.add(candidate if candidate in MODULES else module)
    return {m for m in out if m}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _project(imports: set[str]) -> set[str]:
    return {m for m in imports if m.split(".")[0] in PACKAGES}


def _layer(module: str) -> tuple[str, int] | None:
    package = module.split(".")[0]
    for index, prefix in enumerate(LAYERS.get(package, [])):
        if module == prefix or module.startswith(prefix + "."):
            return package, index
    return None


def test_every_module_is_in_a_layer():
    unplaced = [m for m in MODULES if m.split(".")[0] in LAYERS and m not in LAYERS
                and _layer(m) is None]
    assert not unplaced, f"add these modules to a layer in ARCHITECTURE.md and LAYERS: {unplaced}"


def test_the_language_imports_nothing_above_it_and_never_torch():
    bad = {m: sorted(i for i in imports if i.split(".")[0] in ("codegen", "training", "torch",
                                                                  "transformers", "trl"))
           for m, imports in GRAPH.items() if m.startswith("dragon_dsl")}
    assert not {m: i for m, i in bad.items() if i}


def test_codegen_never_imports_training():
    bad = {m: sorted(i for i in imports if i.startswith("training"))
           for m, imports in GRAPH.items() if m.startswith("codegen")}
    assert not {m: i for m, i in bad.items() if i}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_layers_point_down(package):
    upward = []
    for module, imports in GRAPH.items():
        mine = _layer(module)
        if mine is None or mine[0] != package:
            continue
        for target in _project(imports):
            theirs = _layer(target)
            if theirs is not None and theirs[0] == package and theirs[1] > mine[1]:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that point up a layer: " + ", ".join(sorted(upward))


def test_no_import_cycles():
    # Tarjan's strongly connected components over project modules; a package's __init__
    # re-exporting its submodules is an edge like any other.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(_project(GRAPH.get(node, set())) & set(MODULES)):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(MODULES):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checks_can_fail():
    # The graph must see lazy imports inside functions (they are most of this project's).
    assert "codegen.workloads.models" in GRAPH["codegen.workloads.specs"]
    assert "codegen.workloads.inspect" in GRAPH["codegen.measure.verify"]


def test_training_is_all_wings():
    # training/ holds sub-packages only: a module at its top belongs to one of the wings.
    flat = sorted(p.name for p in (ROOT / "training").glob("*.py") if p.name != "__init__.py")
    assert not flat, f"move these into a wing of training/ (see ARCHITECTURE.md): {flat}"
