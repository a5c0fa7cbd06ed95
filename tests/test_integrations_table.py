"""The README and docs/integrations.md say, for every integration module, which core features
apply: a new module of ``agentsession.integrations`` without a row fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(
    p.stem for p in (ROOT / "src" / "agentsession" / "integrations").glob("*.py")
    if not p.stem.startswith("_")
)
FEATURES = ("derived history", "crash recovery", "compaction", "history cap", "usage", "viewer")


def _table(path: Path) -> str:
    """The table after the page's ``integrations table`` comment."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r"<!-- integrations table[^>]*-->\n((?:\|.*\n)+)", text)
    assert found is not None, f"{path.name} has no integrations table"
    return found.group(1)


def test_there_are_integration_modules() -> None:
    assert MODULES == ["adk", "claude", "langchain", "langgraph", "openai_agents", "pydantic_ai"]


@pytest.mark.parametrize("page", ["README.md", "docs/integrations.md"])
def test_the_table_names_every_integration_module(page: str) -> None:
    table = _table(ROOT / page)
    for module in MODULES:
        assert f"(`{module}`)" in table, f"{page}'s table has no column or row for {module}"


def test_the_docs_table_says_what_each_core_feature_does() -> None:
    rows = _table(ROOT / "docs" / "integrations.md").splitlines()[2:]
    for feature in FEATURES:
        [row] = [r for r in rows if r.startswith(f"| {feature}")]
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert len(cells) == len(MODULES) and all(cells), row
