"""No module is imported because a request, a job row or an argument named it: the package
imports by name only in the few places that read names from the project's own settings."""

from __future__ import annotations

import ast
from pathlib import Path

import django_workqueue

PACKAGE = Path(django_workqueue.__file__).parent
IMPORTERS = {"import_string", "import_module", "__import__"}
# Each module that imports by name, and the settings it reads the names from. A name from a
# request, a job row, a schedule or a command line must be looked up in the registry instead
# (registry.find_task).
SETTINGS_READERS = {
    "discovery.py": "the installed apps' tasks modules, WORKQUEUE['TASK_MODULES'], ROOT_URLCONF",
    "conf.py": "TASKS[...]['BACKEND'], to know which aliases run on django-workqueue",
    "apps.py": "the eager runner (django_workqueue.testing.runner) when WORKQUEUE['EAGER'] is on",
    "backend.py": "functions named in TASKS[...]['OPTIONS'] (or @task arguments in code)",
    "checks.py": "WORKQUEUE['BACKPRESSURE'] and WORKQUEUE['MIDDLEWARE'], to check them",
    "middleware.py": "WORKQUEUE['MIDDLEWARE']",
    "flow/backpressure.py": "WORKQUEUE['BACKPRESSURE']",
    "realtime/mounted.py": "ASGI_APPLICATION, to see whether it routes the job websocket",
}


def imports_by_name(source: str) -> list[str]:
    """The calls in ``source`` that import a module by a name computed at run time."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in IMPORTERS:
                found.append(f"calls {name}")
    return found


def test_the_scan_finds_each_way_to_import_by_name() -> None:
    source = (
        "import importlib\nfrom django.utils.module_loading import import_string\n"
        "importlib.import_module(a)\nimport_string(b)\n__import__(c)\n"
    )
    assert imports_by_name(source) == [
        "calls import_module", "calls import_string", "calls __import__",
    ]  # fmt: skip
    assert imports_by_name("from importlib import util\nutil.find_spec('channels')\n") == []


def test_only_the_settings_readers_import_by_name() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert {"registry.py", "django_tasks.py", "run.py"} <= {m.name for m in modules}
    importing = {
        module.relative_to(PACKAGE).as_posix()
        for module in modules
        if imports_by_name(module.read_text())
    }
    unexpected = sorted(importing - set(SETTINGS_READERS))
    assert unexpected == [], (
        f"{unexpected} import by name: look names from outside up in the registry instead; "
        f"a module that only imports names from the project's settings belongs in "
        f"SETTINGS_READERS, with the settings it reads"
    )
