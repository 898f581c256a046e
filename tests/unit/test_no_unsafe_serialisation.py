"""JSON only: the package never deserialises with pickle, marshal or an unsafe YAML loader."""

from __future__ import annotations

import ast
from pathlib import Path

import django_workqueue

PACKAGE = Path(django_workqueue.__file__).parent
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle"}


def unsafe_uses(source: str) -> list[str]:
    """What in ``source`` could deserialise untrusted bytes into code or objects."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [(node.module or "").split(".")[0]]
        else:
            modules = []
        found += [f"imports {module}" for module in modules if module in FORBIDDEN_MODULES]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"load", "load_all"}
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "yaml"
            and not any(
                kw.arg == "Loader" and "Safe" in ast.unparse(kw.value) for kw in node.keywords
            )
        ):
            found.append(f"calls yaml.{node.func.attr} without a safe Loader")
    return found


def test_the_scan_catches_what_it_forbids():
    source = "import pickle\nfrom marshal import loads\nimport yaml\nyaml.load(s)\n"
    assert unsafe_uses(source) == [
        "imports pickle", "imports marshal", "calls yaml.load without a safe Loader",
    ]  # fmt: skip
    assert unsafe_uses("import json, yaml\nyaml.load(s, Loader=yaml.SafeLoader)\n") == []


def test_no_module_of_the_package_deserialises_unsafely():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert {"enqueue.py", "payload.py", "runner.py", "run.py"} <= {m.name for m in modules}
    problems = [
        f"{module.relative_to(PACKAGE.parent)}: {use}"
        for module in modules
        for use in unsafe_uses(module.read_text())
    ]
    assert problems == []
