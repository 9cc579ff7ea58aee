"""docs/architecture.md's map matches the folders: every module of console/, remote/ and
pipeline/ (and every package) has its one line there, no line names a file that is gone, each
package's lines are sorted by name; and every source file over 400 lines is in its table of files
that stay over (with a reason).

The map's lines are `NAME  what it holds`, indented two spaces per package level, so a line's
path is its name under the package lines above it. A failure says which line to add or remove
and where, so that whoever adds a module (or merges a branch that did) can fix the map at once.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text()
ROOTS = ("console", "remote", "pipeline")
LIMIT = 400
LINE = re.compile(r"^(?P<indent>(?:  )*)(?P<name>[^\s/]+/?) {2,}(?P<what>\S.*)$")


def _block() -> list[str]:
    section = DOC.split("## The map\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```\n", 2)[1].splitlines()


def _entries(lines: list[str]) -> tuple[list[tuple[str, int]], list[str]]:
    """Each line's path (`console/tui/app.py`, `console/tui/` for a package) with its line
    number in the block, and what is wrong with the lines that are not `NAME  what`."""
    entries, wrong, stack = [], [], []  # stack: the package path of each indent level
    for number, line in enumerate(lines, 1):
        match = LINE.match(line)
        if match is None:
            wrong.append(f"map line {number} is not `NAME  what it holds` (one line each, "
                         f"indented two spaces per level): {line!r}")
            continue
        depth = len(match["indent"]) // 2
        if depth > len(stack):
            wrong.append(f"map line {number} is indented deeper than a package line above it: "
                         f"{line!r}")
            continue
        del stack[depth:]
        path = (stack[-1] if stack else "") + match["name"]
        entries.append((path, number))
        if path.endswith("/"):
            stack.append(path)
    return entries, wrong


def _modules() -> set[str]:
    """Every package (`remote/link/`) and module (`remote/link/ssh.py`) of the roots."""
    found = set()
    for root in ROOTS:
        found.add(f"{root}/")
        for path in (REPO / root).rglob("*.py"):
            rel = path.relative_to(REPO)
            if "__pycache__" in rel.parts:
                continue
            if path.name == "__init__.py":
                found.add(rel.parent.as_posix() + "/")
            else:
                found.add(rel.as_posix())
    return found


def _parent(path: str) -> str:
    """`console/tui/` for `console/tui/app.py` and for `console/tui/widgets/`."""
    head = path.rstrip("/").rpartition("/")[0]
    return head + "/" if head else ""


def _name(path: str) -> str:
    return path.rstrip("/").rpartition("/")[2] + ("/" if path.endswith("/") else "")


def _where(path: str, documented: list[str]) -> str:
    """Where the missing `path` goes: under its package's line, after the sibling it follows."""
    parent = _parent(path)
    depth = path.rstrip("/").count("/")
    line = f"`{'  ' * depth}{_name(path)}  <what it holds>`"
    siblings = sorted((p for p in documented if _parent(p) == parent), key=_name)
    before = [p for p in siblings if _name(p) < _name(path)]
    if parent and parent not in documented:
        return f"add {line} under the line of {parent}, which is missing too"
    place = f"after `{_name(before[-1])}`" if before else "as its first line"
    under = f"in the block of {parent}" if parent else "at the top level"
    return f"add {line} {under}, {place}"


def test_the_map_is_one_line_per_entry() -> None:
    entries, wrong = _entries(_block())
    assert wrong == []
    assert len(entries) > 200  # the block was found and read


def test_every_module_is_on_the_map() -> None:
    entries, _ = _entries(_block())
    documented = [path for path, _ in entries]
    missing = sorted(_modules() - set(documented))
    assert missing == [], "not on docs/architecture.md's map (## The map):\n" + "\n".join(
        f"  {path}: {_where(path, documented)}" for path in missing)


def test_every_line_of_the_map_names_a_file_that_is() -> None:
    entries, _ = _entries(_block())
    gone = [f"  map line {number}: {path} does not exist: remove the line (or fix its indent)"
            for path, number in entries
            if not (REPO / path).exists() or (path.endswith("/") and path not in _modules())]
    assert gone == [], "docs/architecture.md's map names what is not there:\n" + "\n".join(gone)


def test_each_package_lists_its_lines_sorted_by_name() -> None:
    entries, _ = _entries(_block())
    out_of_order = []
    last: dict[str, str] = {}
    for path, number in entries:
        parent, name = _parent(path), _name(path)
        if parent in last and name < last[parent]:
            out_of_order.append(f"  map line {number}: {path} comes before `{last[parent]}` "
                                f"in {parent or 'the top level'}")
        last[parent] = name
    assert out_of_order == [], "docs/architecture.md's map, out of order:\n" + "\n".join(
        out_of_order)


def test_every_file_over_the_limit_is_listed_with_a_reason() -> None:
    listed = dict(re.findall(r"^\| ([\w/.]+\.py) \| (\d+) \| (?:.+) \|$", DOC, re.M))
    over = {}
    for root in (*ROOTS, "benchmarks", "scripts"):
        for path in sorted((REPO / root).rglob("*.py")):
            n = len(path.read_text().splitlines())
            if n > LIMIT:
                over[path.relative_to(REPO).as_posix()] = n
    assert sorted(set(over) - set(listed)) == [], "over 400 lines and not in docs/architecture.md"
    assert sorted(set(listed) - set(over)) == [], "listed as over 400 lines but no longer is"
