"""``docs/porting.md`` stays true: every row's Python name resolves, every agentkit name of
``docs/interop.md`` has its rows, and the README links the page."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import agentsession

DOCS = Path(__file__).parent.parent / "docs"
GUIDE = DOCS / "porting.md"
CODE = re.compile(r"`([^`]+)`")


def cells_of(line: str) -> list[str]:
    """A table row's cells (a pipe escaped as ``\\|`` stays in its cell)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def tables() -> dict[str, list[list[str]]]:
    """The guide's name tables by their heading: each row's cells."""
    found: dict[str, list[list[str]]] = {}
    heading = ""
    for line in GUIDE.read_text().splitlines():
        if line.startswith("### "):
            heading = line[4:]
        elif line.startswith("| `") and heading:
            found.setdefault(heading, []).append(cells_of(line))
    return found


def resolve(dotted: str) -> object:
    """The object ``agentsession.<dotted>`` names: the longest importable module prefix, then
    attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(["agentsession", *parts[:cut]]))
        except ImportError:
            continue
        rest = parts[cut:]
        break
    else:
        obj, rest = agentsession, parts
    for name in rest:
        obj = getattr(obj, name)
    return obj


ROWS = [(heading, row) for heading, rows in tables().items() for row in rows]


def test_the_guide_has_a_table_per_go_package() -> None:
    assert list(tables()) == [
        "`agentkit`: the root package `agentkit` (`agentkit.go`, `envelope.go`, `events.go`, "
        "the session interfaces)",
        "`session`: v0.2.1's single `runtime/session` package",
        "`sessstore`: `runtime/session/sessstore`",
        "`sessevents`: `runtime/session/sessevents`",
        "`derive`: `runtime/session/derive`",
        "`internal/session`",
    ]
    assert all(len(row) == 4 for _, row in ROWS)


@pytest.mark.parametrize(("heading", "row"), ROWS, ids=[f"{h[:12]}:{r[0]}" for h, r in ROWS])
def test_each_rows_python_name_resolves(heading: str, row: list[str]) -> None:
    python = row[1]
    if python.startswith("none"):
        assert python.startswith("none: ") and len(python) > 12, (
            "a name without equivalent says why"
        )
        return
    match = CODE.match(python)
    assert match is not None, f"{row[0]}: the Python cell starts with a name in backticks"
    resolve(match.group(1))


def test_resolve_fails_on_a_name_that_does_not_exist() -> None:
    with pytest.raises(AttributeError):
        resolve("BaseSession.no_such_method")


def test_every_agentkit_name_of_the_interop_table_is_in_the_guide() -> None:
    interop = (DOCS / "interop.md").read_text()
    start = interop.index("| agentkit name | package(s) | agentsession equivalent |")
    expected: dict[str, set[str]] = {}
    for line in interop[start:].splitlines()[2:]:
        if not line.startswith("| `"):
            break
        name, packages = cells_of(line)[:2]
        expected[name.strip("`")] = {p.strip() for p in packages.split(",")}
    listed: dict[str, set[str]] = {}
    for heading, row in ROWS:
        package = CODE.match(heading)
        assert package is not None
        if package.group(1) != "internal/session":
            listed.setdefault(row[0].strip("`"), set()).add(package.group(1))
    assert listed == expected


def test_the_readme_links_the_guide() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert "docs/porting.md" in readme
