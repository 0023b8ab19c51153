"""House rules a review would otherwise have to remember, checked on every run.

Small modules and short functions (a file under ``chaz/`` of at most 700
lines, a function of at most 80; migrations excepted, as a released revision
is never edited), and no import cycle among ``chaz`` and
``workers`` counting every import, those under ``if TYPE_CHECKING:`` too
(``lint-imports`` checks the layers with those left out). Each failure lists
every offender with its size, so one run says all that is left to do.

Comments cite the rules they follow by a section of ``docs/contracts.md``,
never by a document outside the repository, and every section they cite is
there; the invariants table of ``docs/architecture.md`` names tests that
exist, one row for each invariant ``docs/contracts.md`` states.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
CHAZ = ROOT / "chaz"
CONTRACTS = ROOT / "docs" / "contracts.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: Where comments may cite rules.
CITING = ("chaz", "workers", "benchmarks", "tests")
#: One Alembic revision per file, never edited once released (0003's upgrade
#: is 85 lines).
MIGRATIONS = CHAZ / "store" / "migrations"
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80


def _chaz_sources() -> Iterator[Path]:
    for path in sorted(CHAZ.rglob("*.py")):
        if not path.is_relative_to(MIGRATIONS):
            yield path


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_file_under_chaz_is_above_700_lines() -> None:
    sizes = {_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in _chaz_sources()}
    over = [f"{name}: {n} lines" for name, n in sorted(sizes.items()) if n > MAX_FILE_LINES]
    assert not over, f"files above {MAX_FILE_LINES} lines:\n" + "\n".join(over)


def _functions(path: Path) -> Iterator[tuple[str, int]]:
    """Each function's dotted name in its module and its length in lines, from
    its ``def`` to its last line (docstring included, decorators not)."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield name, (child.end_lineno or child.lineno) - child.lineno + 1
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")


def test_no_function_under_chaz_is_above_80_lines() -> None:
    over = [
        f"{_name(path)}:{name}: {n} lines"
        for path in _chaz_sources()
        for name, n in _functions(path)
        if n > MAX_FUNCTION_LINES
    ]
    assert not over, f"functions above {MAX_FUNCTION_LINES} lines:\n" + "\n".join(over)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The graph's strongly connected components of more than one module
    (Tarjan's algorithm, iterative: the graph is deeper than the recursion
    limit likes)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges.get(target, []))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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
    return sorted(found)


def test_no_import_cycle_among_chaz_and_workers() -> None:
    # grimp records `from chaz.store import x` as an import of chaz.store.x, and
    # adds no edge for the parent package a submodule import runs implicitly:
    # an edge to a package is a real import of its __init__, and a cycle
    # through one is a real cycle.
    graph = grimp.build_graph(
        "chaz", "workers", exclude_type_checking_imports=False, cache_dir=None
    )
    cycles = _cycles(graph)
    assert not cycles, f"{len(cycles)} import cycles:\n" + "\n".join(
        f"{len(c)} modules: {', '.join(c)}" for c in cycles
    )


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(module)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.b")
    graph.add_import(importer="a.d", imported="a.b")
    assert _cycles(graph) == [["a.b", "a.c"]]


# -- citations ----------------------------------------------------------------

#: A citation of a document that is not in the repository: the seed documents
#: the contracts were first written from ("seed 003", their sections), and the
#: design brief. This file names them to forbid them, so it is not scanned.
OUTSIDE = re.compile(r"\b[Ss]eeds? ?0\d\d|\u00a7|\bDESIGN\b|\bthe seed's\b")
CITED = re.compile(r"contracts\.md#([\w-]+)")


def _citing_sources() -> Iterator[Path]:
    for folder in CITING:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() != Path(__file__).resolve():
                yield path


def test_comments_cite_no_document_outside_the_repository() -> None:
    found = [
        f"{_name(path)}:{n}: {line.strip()}"
        for path in _citing_sources()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, (
        "cite the section of docs/contracts.md that states the rule instead:\n" + "\n".join(found)
    )


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors a page has: explicit ``<a id>`` ones and its headings'."""
    found = set(re.findall(r'<a id="([^"]+)"></a>', markdown))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.M):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_anchors_follow_githubs_rule() -> None:
    page = "## 4.3 Busy-target inbox\n## `agent` and `spawn_agent`\n## Names\n## Names\n"
    assert anchors(page) == {"43-busy-target-inbox", "agent-and-spawn_agent", "names", "names-1"}


def test_every_section_of_the_contracts_that_is_cited_exists() -> None:
    known = anchors(CONTRACTS.read_text(encoding="utf-8"))
    citing = [*_citing_sources(), ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [
        f"{_name(path)}:{n}: contracts.md#{anchor}"
        for path in citing
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for anchor in CITED.findall(line)
        if anchor not in known
    ]
    assert not missing, "no such section in docs/contracts.md:\n" + "\n".join(missing)


# -- the invariants table ------------------------------------------------------

TABLE_HEADING = "## Invariants and the tests that break them"
#: A test the table cites: ``acceptance/test_x.py::test_name``, ``::test_name``
#: (of the file named before it in the row) or a whole file.
CITED_TEST = re.compile(r"`((?:unit|integration|acceptance)/[\w/]+\.py)?(?:::(\w+))?`")


def _table_rows() -> dict[int, str]:
    page = ARCHITECTURE.read_text(encoding="utf-8")
    section = page.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows: dict[int, str] = {}
    for line in section.splitlines():
        number = re.match(r"\| \[?(\d+)\]?(?:\([^)]*\))? \|", line)
        if number:
            rows[int(number[1])] = line
    return rows


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def test_the_invariants_table_has_a_row_for_every_invariant() -> None:
    stated = {int(n) for n in re.findall(r'<a id="invariant-(\d+)"></a>', CONTRACTS.read_text())}
    assert stated, "docs/contracts.md states no invariant"
    assert set(_table_rows()) == stated


def test_every_test_the_invariants_table_cites_exists() -> None:
    missing: list[str] = []
    for number, row in sorted(_table_rows().items()):
        cited = 0
        path: str | None = None
        for file, name in CITED_TEST.findall(row):
            if not file and not name:
                continue
            path = file or path
            if path is None:
                missing.append(f"invariant {number}: ::{name} names no file")
                continue
            cited += 1
            where = ROOT / "tests" / path
            if not where.is_file():
                missing.append(f"invariant {number}: tests/{path} does not exist")
            elif name and name not in _test_names(where):
                missing.append(f"invariant {number}: tests/{path}::{name} does not exist")
        if not cited:
            missing.append(f"invariant {number}: no test")
    assert not missing, "the invariants table of docs/architecture.md:\n" + "\n".join(missing)
