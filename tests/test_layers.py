"""The packages' dependency direction: sdk <- trainer <- export <- deploy.

``uvtrain`` imports neither ``uvexport`` nor ``uvdeploy``; ``uvexport`` does not import
``uvdeploy``. (``uvsdk`` importing none of them is tests/sdk/test_isolation.py's.)
``uvtrain deploy`` reaches the deployment through the ``uvtrain.commands`` entry point, never by
an import.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from tests.processes import run_until_stalled

ROOT = Path(__file__).resolve().parents[1]
#: package -> (its source folder, the packages above it that it must never import)
LAYERS = {
    "uvtrain": (ROOT / "trainer" / "uvtrain", ("uvexport", "uvdeploy")),
    "uvexport": (ROOT / "export" / "uvexport", ("uvdeploy",)),
}


def imported_packages(path: Path) -> set[str]:
    """Top-level packages a module imports: ``import``/``from`` statements anywhere in it
    (functions' lazy imports too) and ``importlib.import_module``/``__import__`` of a literal."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            name = node.func.id if isinstance(node.func, ast.Name) else name
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_package_imports_one_above_it(package: str) -> None:
    folder, above = LAYERS[package]
    sources = sorted(folder.rglob("*.py"))
    assert sources
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources
        for name in sorted(imported_packages(path) & set(above))
    ]
    assert not wrong, wrong


def test_the_trainer_and_the_exporter_load_no_deployment() -> None:
    """Imported for real: the trainer's command line and run, and the exporter, leave
    ``uvexport``/``uvdeploy`` out of ``sys.modules`` as the layers say."""
    program = (
        "import json, sys\n"
        "import uvtrain.cli, uvtrain.run\n"
        "trainer = sorted({m.split('.')[0] for m in sys.modules})\n"
        "import uvexport.export\n"
        "export = sorted({m.split('.')[0] for m in sys.modules})\n"
        "print(json.dumps([trainer, export]))\n"
    )
    output = run_until_stalled([sys.executable, "-c", program], stall_seconds=300, check=True)
    trainer, export = json.loads(output.stdout.splitlines()[-1])
    assert "uvtrain" in trainer and not {"uvexport", "uvdeploy"} & set(trainer)
    assert "uvexport" in export and "uvdeploy" not in export


def test_uvtrain_deploy_is_the_deployments_entry_point() -> None:
    from uvtrain.cli import command_plugins

    entry = command_plugins()["deploy"]
    assert entry.value == "uvdeploy.cli:deploy_app"


#: every package of the distribution, by import name
PACKAGES = {
    "uvsdk": ROOT / "sdk" / "uvsdk",
    "uvtrain": ROOT / "trainer" / "uvtrain",
    "uvexport": ROOT / "export" / "uvexport",
    "uvdeploy": ROOT / "deploy" / "uvdeploy",
}


def module_imports() -> dict[str, set[str]]:
    """Each module of the distribution and the modules of it that it imports: statements
    anywhere in it (functions' lazy imports too, since they run), ``from . import x`` read as the
    submodule ``x`` when it is one; what only a type checker imports (``if TYPE_CHECKING:``) is
    not an import."""
    files: dict[str, tuple[Path, bool]] = {}
    for top, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [top, *path.relative_to(folder).with_suffix("").parts]
            package = parts[-1] == "__init__"
            files[".".join(parts[:-1] if package else parts)] = (path, package)
    edges: dict[str, set[str]] = {name: set() for name in files}
    for name, (path, package) in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges[name].update(alias.name for alias in node.names if alias.name in files)
            elif isinstance(node, ast.ImportFrom):
                here = name.split(".") if package else name.split(".")[:-1]
                base = here[: len(here) - node.level + 1] if node.level else []
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in files or target in files:
                        edges[name].add(sub if sub in files else target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_circles_are_found() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others() -> None:
    """Issue 48: no import circle, lazy imports counted (a circle through a function's import
    is a circle all the same: it only breaks later)."""
    edges = module_imports()
    assert len(edges) > 120 and "uvtrain.config.run" in edges["uvtrain.config"]
    assert circles(edges) == []
