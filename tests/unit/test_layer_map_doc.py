"""docs/explanation/architecture.md's layer map says what import-linter's layers contract
(pyproject.toml) enforces: each layer's row names the modules of that layer and no other, and
the modules the page names exist."""

from __future__ import annotations

import re
import tomllib

from tests.support.layering import PACKAGE, ROOT

ARCHITECTURE = ROOT / "docs" / "explanation" / "architecture.md"
_ROW = re.compile(r"^\| (\d+) [^|]*\| (.*?) \| [^|]* \|$")
_NAME = re.compile(r"`([^`]+)`")


def contract_layers() -> dict[int, set[str]]:
    """Layer number (1 at the bottom) -> the modules the contract puts on it (no package
    prefix: ``flow.claim``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(
        each for each in config["tool"]["importlinter"]["contracts"] if each["type"] == "layers"
    )
    top_first = contract["layers"]
    return {
        len(top_first) - index: {name.strip() for name in re.split(r"[:|]", layer)}
        for index, layer in enumerate(top_first)
    }


def _module(path: str) -> str | None:
    """``flow/keys.py`` -> ``flow.keys``, ``db/`` -> ``db``; None if not a module's path."""
    if path.endswith("/"):
        return path.rstrip("/").replace("/", ".")
    if path.endswith(".py"):
        return path.removesuffix(".py").replace("/", ".")
    return None


def named_modules(cell: str) -> set[str]:
    """The modules a row's cell names: ``pkg/`` and ``x.py`` outside parentheses, and inside
    the parentheses that follow ``pkg/``, its modules (``workflow/`` (``canvas.py``, ...))."""
    named: set[str] = set()
    depth, package, last = 0, None, None
    for match in re.finditer(r"`[^`]+`|[()]", cell):
        token = match.group()
        if token == "(":
            if depth == 0:
                package = last if last and last.endswith("/") else None
            depth += 1
        elif token == ")":
            depth -= 1
        else:
            text = token.strip("`")
            if depth == 0:
                last = text
                module = _module(text)
            else:
                module = _module(package + text) if package else None
            if module:
                named.add(module)
    return named


def document_layers() -> dict[int, set[str]]:
    rows = (_ROW.match(line) for line in ARCHITECTURE.read_text().splitlines())
    return {int(row[1]): named_modules(row[2]) for row in rows if row}


def _covers(module: str, entry: str, elsewhere: set[str]) -> bool:
    """Whether naming ``module`` names the contract's ``entry``: the same module, a module
    inside it, or a package holding it — unless the package is split across layers
    (``elsewhere``: the other layers' entries), whose modules are then named one by one."""
    if module == entry or module.startswith(entry + "."):
        return True
    return entry.startswith(module + ".") and not any(
        other.startswith(module + ".") for other in elsewhere
    )


def disagreements(contract: dict[int, set[str]], document: dict[int, set[str]]) -> list[str]:
    found = []
    if sorted(document) != sorted(contract):
        found.append(f"rows {sorted(document)}, layers {sorted(contract)}")
    for layer, entries in sorted(contract.items()):
        named = document.get(layer, set())
        elsewhere = set().union(*(other for n, other in contract.items() if n != layer))
        for entry in sorted(entries):
            if not any(_covers(module, entry, elsewhere) for module in named):
                found.append(f"layer {layer}'s row does not name {entry}")
        for module in sorted(named):
            if not any(_covers(module, e, set()) or e.startswith(module + ".") for e in entries):
                found.append(f"layer {layer}'s row names {module}, which is not on that layer")
    return found


def test_the_layer_map_names_the_contracts_layers():
    assert disagreements(contract_layers(), document_layers()) == []


def test_the_modules_the_page_names_exist():
    # Inline code only, line by line: a fenced block's backticks would pair the rest wrongly.
    prose = re.sub(r"^```.*?^```", "", ARCHITECTURE.read_text(), flags=re.MULTILINE | re.DOTALL)
    names = (name for line in prose.splitlines() for name in _NAME.findall(line))
    paths = {name for name in names if "/" in name and _module(name)}
    assert "attempt/run.py" in paths  # the check reads the page's names
    missing = sorted(
        path
        for path in paths
        if not (ROOT / PACKAGE / path).exists() and not (ROOT / path).exists()
    )
    assert missing == []


def test_a_row_that_disagrees_with_the_contract_is_found():
    contract = {
        1: {"conf"}, 4: {"registry", "discovery", "flow.keys"}, 6: {"flow.claim", "flow.claimer"},
        7: {"attempt"}, 8: {"worker"},
    }  # fmt: skip
    cells = {
        1: "`conf.py`",
        4: "`registry.py` (`TaskSpec`), `flow/keys.py`",  # discovery.py left out
        6: "`flow/` (`claim.py`)",  # flow is split across layers: claimer.py must be named
        7: "`attempt/` (`run.py`), `worker/lease.py`",  # a module of layer 8
        8: "`worker/` (the control loop, `slots.py`)",
    }
    document = {layer: named_modules(cell) for layer, cell in cells.items()}
    assert document[8] == {"worker", "worker.slots"}
    assert disagreements(contract, document) == [
        "layer 4's row does not name discovery",
        "layer 6's row does not name flow.claimer",
        "layer 7's row names worker.lease, which is not on that layer",
    ]
    cells[4] += ", `discovery.py`"
    cells[6] = "`flow/` (`claim.py`, `claimer.py`)"
    cells[7] = "`attempt/` (`run.py`, `lease.py`)"
    document = {layer: named_modules(cell) for layer, cell in cells.items()}
    assert disagreements(contract, document) == []
