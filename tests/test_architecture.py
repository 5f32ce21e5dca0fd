"""The layout holds: no import cycle among scrub's modules, at module level or inside functions
(a cycle held together by function-level imports is still a cycle: the modules cannot be read,
tested or replaced one without the other); only the storage package tells a URL from a path;
the top of the package holds few modules (the public
API, the commands and the shared types: the rest lives in packages that say what it is); and no
function runs over 80 lines without the reason written beside it."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "scrub"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: those under ``if TYPE_CHECKING:`` never do."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """scrub's modules and the scrub modules each names in an import (``from scrub.checks import
    REGISTRY`` names the package; ``from scrub.checks import base`` its module too). The parent
    packages Python initializes on the way are not edges: a package that gathers its modules
    (``scrub.checks`` registering every check) would otherwise be a cycle with each of them."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            graph[name].update(target for target in targets if target in paths and target != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return found


def test_no_module_of_scrub_is_part_of_an_import_cycle():
    graph = import_graph()
    assert len(graph) > 60 and sum(map(len, graph.values())) > 200  # the walk saw the package
    assert cycles(graph) == []


def test_the_cycle_finder_finds_one():
    """Not vacuous: a cycle held by a function-level import is found, one under TYPE_CHECKING not."""
    graph = {"scrub.a": {"scrub.b"}, "scrub.b": {"scrub.c"}, "scrub.c": {"scrub.a"}, "scrub.d": set()}
    assert cycles(graph) == [["scrub.a", "scrub.b", "scrub.c"]]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import scrub.x\n"
    tree = ast.parse(source + "def f():\n    import scrub.y\n")
    assert [ast.unparse(node) for node in runtime_imports(tree)] == [
        "from typing import TYPE_CHECKING",
        "import scrub.y",
    ]


def url_tests(tree: ast.Module) -> list[int]:
    """The lines that name `scrub.storage.is_url` (imported, called or passed on)."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "is_url")
        or (isinstance(node, ast.Attribute) and node.attr == "is_url")
        or (isinstance(node, ast.ImportFrom) and any(alias.name == "is_url" for alias in node.names))
    )


def test_only_the_storage_package_tells_a_url_from_a_path():
    """Readers, writers, the scan and the fix see one storage interface (`scrub.storage.base.
    Storage`, local and fsspec implementations): they ask it what a place can do
    (`Storage.local_path`, `Storage.forks_cleanly`, `Storage.publish`...), never whether a
    location is a URL, so a third storage would need no edit outside the package."""
    found = {
        str(path.relative_to(REPO)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "storage"
        and (lines := url_tests(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}
    seen = url_tests(ast.parse((PACKAGE / "storage" / "__init__.py").read_text(encoding="utf-8")))
    assert seen  # not vacuous: the finder sees the package's own


#: the most modules the top of `scrub/` may hold (``__init__`` and ``__main__`` included)
TOP_LEVEL_MOST = 15
#: the longest a function may be without a reason written beside it
LONGEST = 80
#: how that reason opens: a comment just above the function (or its decorators)
REASON = "# Over 80 lines"


def test_the_top_of_the_package_holds_at_most_15_modules():
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MOST, top


def long_functions() -> list[str]:
    """``path:line name (lines)`` of every function over `LONGEST` lines with no `REASON` above it."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = node.end_lineno - node.lineno + 1
                at = first - 1  # the comment block just above, from its first line
                while at > 0 and lines[at - 1].strip().startswith("#"):
                    at -= 1
                said = lines[at].strip() if at < first - 1 else ""
                if length > LONGEST and not said.startswith(REASON):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length})")
    return found


def test_no_function_is_over_80_lines_without_a_reason_beside_it():
    assert long_functions() == []


def test_the_long_function_finder_finds_one(tmp_path, monkeypatch):
    body = "\n".join(f"    x = {n}" for n in range(LONGEST))
    (tmp_path / "scrub").mkdir()
    (tmp_path / "scrub" / "long.py").write_text(
        f"def long():\n{body}\n\n\n{REASON}: why.\ndef said():\n{body}\n"
    )
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "scrub")
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    assert long_functions() == ["scrub/long.py:1 long (81)"]
