"""The layer map holds: import-linter's contracts (pyproject.toml) are kept, a violating import
breaks them, and no module of django_workqueue imports itself back through others."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.layering import ROOT, import_cycles, import_graph

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")  # the test extra's import-linter


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root, env={"PYTHONPATH": str(root), "PATH": ""}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def copy_of_the_package(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "django_workqueue", tmp_path / "django_workqueue",
        ignore=shutil.ignore_patterns("__pycache__", "static", "templates"),
    )  # fmt: skip
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # a pure rule reaching up to the operations, inside a function: still a dependency
        ("states.py", "def _up():\n    from . import operations\n", "layers"),
        # the task definitions reaching up to enqueue
        ("registry.py", "from . import enqueue\n", "layers"),
        # production code importing the testing helpers
        ("operations/jobs.py", "def _drain():\n    from ..testing import drain\n", "testing"),
    ],
)
def test_a_violating_import_breaks_a_contract(tmp_path, module, line, broken):
    root = copy_of_the_package(tmp_path)
    path = root / "django_workqueue" / module
    path.write_text(path.read_text() + "\n\n" + line)
    result = lint_imports(root)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    kept_or_broken = [row for row in result.stdout.splitlines() if "BROKEN" in row]
    assert any(broken in row for row in kept_or_broken), result.stdout


def test_no_module_imports_itself_back_through_others():
    """Import cycles, counting imports inside functions, leaving out those the layers
    contract lists in ``ignore_imports`` (each with its reason there)."""
    graph = import_graph()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for contract in config["tool"]["importlinter"]["contracts"]:
        for expression in contract.get("ignore_imports", []):
            for match in graph.find_matching_direct_imports(import_expression=expression):
                graph.remove_import(importer=match["importer"], imported=match["imported"])
    assert import_cycles(graph) == []
