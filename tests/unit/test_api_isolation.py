"""The API is an optional extra: no module outside ``django_workqueue/api/`` imports Django
REST framework or drf-spectacular (the ``base`` tox env imports the rest without them)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_workqueue"
OPTIONAL = ("rest_framework", "drf_spectacular")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_only_the_api_package_imports_rest_framework():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "api" not in path.relative_to(PACKAGE).parts[:1]
        and any(name.split(".")[0] in OPTIONAL for name in imported_modules(path))
    ]
    assert offenders == []


def test_the_api_package_does_import_them():
    # The check above must be able to see an import: it does see the API's own.
    assert any(
        name.split(".")[0] == "rest_framework"
        for name in imported_modules(PACKAGE / "api" / "views" / "jobs.py")
    )
