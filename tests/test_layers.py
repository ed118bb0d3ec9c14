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
