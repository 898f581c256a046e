"""The shape of django_workqueue's imports, measured: `python -m tests.support.layering`.

Reports the import cycles among the package's modules (imports inside functions count, those
under `if TYPE_CHECKING:` do not — the same graph `lint-imports` checks), the imports made inside
functions (each with the comment that says why it is not at the top of its module), the longest
function and module, and the lines of code. tests/unit/test_layering.py asserts the cycle count
from the same graph, and that every import inside a function says why.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import grimp

PACKAGE = "django_workqueue"
ROOT = Path(__file__).resolve().parents[2]


def import_graph(package: str = PACKAGE) -> grimp.ImportGraph:
    return grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module, largest first (Tarjan)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(root: str) -> None:
        # Iterative, so a deep chain of imports cannot exhaust Python's recursion limit.
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = lowlink[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append(
                        (
                            successor,
                            iter(sorted(graph.find_modules_directly_imported_by(successor))),
                        )
                    )
                    break
                if successor in on_stack:
                    lowlink[module] = min(lowlink[module], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[module])
                if lowlink[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(components, key=len, reverse=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionImport:
    path: str
    line: int
    module: str
    # Why it is inside a function: the comment on its line(s), or on the line above the run of
    # import statements it belongs to (one comment may explain a block); "" if none says.
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Span:
    name: str
    lines: int


def _modules(package_dir: Path) -> list[Path]:
    return sorted(path for path in package_dir.rglob("*.py") if "migrations" not in path.parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_module(node: ast.Import | ast.ImportFrom, module_name: str) -> str:
    if isinstance(node, ast.Import):
        return node.names[0].name
    if not node.level:
        return node.module or ""
    base = module_name.split(".")[: -node.level]
    return ".".join([*base, node.module] if node.module else base)


# Tool directives are not reasons: a bare noqa code alone says nothing of why.
_DIRECTIVES = re.compile(
    r"noqa(:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^\]]*\])?"
    r"|pragma:\s*no\s+cover|fmt:\s*(skip|off|on)",
    re.IGNORECASE,
)


def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """Line number -> (the text of the comment on that line, whether it is the line's only
    content)."""
    return {
        token.start[0]: (token.string.lstrip("#").strip(), token.line.lstrip().startswith("#"))
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }


def _comment_above(line: int, comments: dict[int, tuple[str, bool]]) -> str:
    """The comment on the line above ``line``, with the comment lines right above it (a
    comment may take several lines)."""
    if line - 1 not in comments:
        return ""
    texts = [comments[line - 1][0]]
    above = line - 2
    while comments[above + 1][1] and above in comments and comments[above][1]:
        texts.insert(0, comments[above][0])
        above -= 1
    return " ".join(texts)


def _reason(comment: str) -> str:
    """The comment if it says something beyond tool directives (two words at least), or ""."""
    words = re.findall(r"[A-Za-z][\w.'-]*", _DIRECTIVES.sub(" ", comment))
    return comment if len(words) >= 2 else ""


def _explain(
    statements: list[ast.Import | ast.ImportFrom], comments: dict[int, tuple[str, bool]]
) -> list[str]:
    """The reason of each import statement (in source order): its own lines' comment, else the
    comment on the line above the run of consecutive import statements it starts or continues."""
    reasons = []
    above = ""
    previous_end = -1
    for node in statements:
        if node.lineno != previous_end + 1:  # a new run: its reason is the line above
            above = _reason(_comment_above(node.lineno, comments))
        own = next(
            (
                _reason(comments[line][0])
                for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                if line in comments and _reason(comments[line][0])
            ),
            "",
        )
        reasons.append(own or above)
        previous_end = node.end_lineno or node.lineno
    return reasons


def function_imports(package_dir: Path) -> list[FunctionImport]:
    """Every import statement inside a function body (outside `if TYPE_CHECKING:`), with the
    comment that says why it is there (see ``FunctionImport.reason``)."""
    return [found for path in _modules(package_dir) for found in _in_functions(path, package_dir)]


def _in_functions(path: Path, package_dir: Path) -> list[FunctionImport]:
    relative = path.relative_to(package_dir.parent)
    parts = relative.with_suffix("").parts
    # A package's own module: a relative import of level 1 names the package itself.
    module_name = ".".join(parts[:-1] if path.name == "__init__.py" else parts)
    if path.name == "__init__.py":
        module_name += ".__init__"
    source = path.read_text()
    tree = ast.parse(source, str(path))
    # Every import statement of the module, in source order: a run of imports may start at the
    # top of a function and be explained by one comment above it.
    statements = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)),
        key=lambda node: node.lineno,
    )
    reasons = dict(zip(statements, _explain(statements, _comments(source)), strict=True))
    found = []

    def walk(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                walk(child, in_function)
            return
        if in_function and isinstance(node, ast.Import | ast.ImportFrom):
            found.append(
                FunctionImport(
                    path=str(relative),
                    line=node.lineno,
                    module=_imported_module(node, module_name),
                    reason=reasons[node],
                )
            )
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            walk(child, inner)

    walk(tree, False)
    return sorted(found, key=lambda each: each.line)


def longest_function(package_dir: Path) -> Span:
    longest = Span(name="", lines=0)
    for path in _modules(package_dir):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > longest.lines:
                    name = f"{path.relative_to(package_dir.parent)}:{node.name}"
                    longest = Span(name=name, lines=lines)
    return longest


def line_counts(package_dir: Path) -> dict[str, int]:
    return {
        str(path.relative_to(package_dir.parent)): len(path.read_text().splitlines())
        for path in _modules(package_dir)
    }


def report(package_dir: Path = ROOT / PACKAGE) -> str:
    cycles = import_cycles(import_graph())
    imports = function_imports(package_dir)
    internal = [each for each in imports if each.module.startswith(PACKAGE)]
    counts = line_counts(package_dir)
    longest_file = max(counts, key=counts.__getitem__)
    function = longest_function(package_dir)
    lines = [
        f"import cycles: {len(cycles)}"
        + "".join(f"\n  {len(cycle)} modules: {', '.join(cycle)}" for cycle in cycles),
        f"imports inside functions: {len(imports)} ({len(internal)} of {PACKAGE} modules;"
        f" {sum(not each.reason for each in imports)} without a reason)",
        *(
            f"  {each.path}:{each.line} {each.module}  # {each.reason or 'NO REASON'}"
            for each in imports
        ),
        f"longest function: {function.name} ({function.lines} lines)",
        f"longest module: {longest_file} ({counts[longest_file]} lines)",
        f"lines of code (without migrations): {sum(counts.values())} in {len(counts)} modules",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(report())
