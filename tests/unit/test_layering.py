"""The layer map holds: import-linter's contracts (pyproject.toml) are kept, a violating import
breaks them, no module of django_workqueue imports itself back through others, and every import
left inside a function says why it is not at the top of its module."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.support.layering import PACKAGE, ROOT, function_imports, import_cycles, import_graph

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


def test_every_import_inside_a_function_says_why():
    """An import inside a function hides a dependency from the top of its module: it stays
    only with a comment (on its line, or above its run of imports) giving the reason — an
    optional extra, a plugin point named by a setting, the app registry not ready at import,
    a command's start-up cost. Otherwise it belongs at the top of the module."""
    unexplained = [
        f"{each.path}:{each.line} imports {each.module}"
        for each in function_imports(ROOT / PACKAGE)
        if not each.reason
    ]
    assert unexplained == [], "move to the top of the module, or say why not:\n" + "\n".join(
        unexplained
    )


def test_an_import_inside_a_function_without_a_reason_is_found(tmp_path):
    package = tmp_path / "sample"
    package.mkdir()
    (package / "module.py").write_text(
        textwrap.dedent(
            """\
            def bare():
                from .models import Job  # noqa: F401

            def explained_on_its_line():
                import psycopg  # the postgres extra: psycopg is optional

            def explained_above_its_run():
                # Imported here: the models need Django's app registry, not ready at import.
                from .models import Job
                from .store import write

            def explained_above_a_try():
                try:  # prometheus-client is an optional extra
                    import prometheus_client
                except ImportError:
                    return None

            def a_run_broken_by_code():
                # Imported here: django.setup() must run first.
                import django

                django.setup()
                from .child import serve
            """
        )
    )
    found = {each.line: each for each in function_imports(package)}
    unexplained = sorted(line for line, each in found.items() if not each.reason)
    assert unexplained == [2, 23]
    assert found[9].reason == found[10].reason
    assert "app registry" in found[10].reason
