"""The Python examples in docs/ run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
RUNNABLE = (
    "subagents.md",
    "providers.md",
    "integrations.md",
    "chat.md",
    "catalog.md",
    "compaction.md",
    "retention.md",
)
"""Pages whose Python blocks are whole programs (others show fragments, such as a PostgreSQL
URL of a server that does not exist here)."""


def blocks() -> list[tuple[str, int, str]]:
    out = []
    for page in (DOCS / name for name in RUNNABLE):
        found = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
        out.extend((page.name, index, code) for index, code in enumerate(found))
    return out


def test_the_subagents_page_has_a_runnable_example() -> None:
    assert any(name == "subagents.md" for name, _, _ in blocks())


@pytest.mark.parametrize(("page", "index", "code"), blocks(), ids=lambda v: str(v)[:20])
def test_a_docs_python_block_runs(
    page: str, index: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"docs/{page} python block {index}", "exec"), {"__name__": "__docs__"})
