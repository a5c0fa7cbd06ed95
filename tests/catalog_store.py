"""What the catalog's command-line and viewer tests share: a store URL whose every opening
sees one memory store's sessions and catalog (the memory backend keeps a catalog index; the
command line opens and closes a store per command), filled with sessions that differ in
every catalog field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agentsession as ags
from agentsession.backends.memory import MemoryCatalog
from agentsession.catalog import StoreParts
from agentsession.follow import LocalWatcher
from agentsession.locks import ThreadLocker

SCHEME = "catalogmem"


def shared_factory(*, index: bool = True) -> Any:
    """A backend factory whose stores share one :class:`MemoryCatalog` (without ``index``:
    a store that keeps no catalog index, as a backend whose index is not built yet)."""
    catalog = MemoryCatalog()

    def factory(url: str, **options: Any) -> ags.BaseStore:
        options.pop("create", None)
        parts = StoreParts(
            catalog,
            catalog.meta,
            locker=ThreadLocker,
            watcher=LocalWatcher,
            index=catalog.index if index else None,
        )
        return ags.BaseStore(parts, **options)

    return factory


def fill(store: ags.BaseStore, count: int = 12) -> None:
    """``count`` sessions ``chat:00``... : tenants acme (even) and globex (odd), users u0-u2,
    agents coder and writer, tags billing (every third) and ops (odd), usage growing with the
    number, a title set on the first; ``chat:open`` is left with a turn open (and no lock)."""
    for n in range(count):
        session = store.get(f"chat:{n:02d}")
        agent = "coder" if n % 2 else "writer"
        with session.turn(agent=agent, user=f"u{n % 3}") as turn:
            turn.user(f"Please deploy build {n} to production")
            with turn.step() as step:
                step.assistant(f"Deploying build {n} now; the invoice follows.")
                step.usage(input_tokens=100 * (n + 1), output_tokens=10 + n)
        tags = [t for t, on in (("billing", n % 3 == 0), ("ops", n % 2 == 1)) if on]
        session.update(
            title="The first session" if n == 0 else None,
            tags=tags,
            tenant="acme" if n % 2 == 0 else "globex",
        )
    store.get("chat:open").append_many(
        [
            ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"),
            ags.Event.new("user/message", ags.Message.user("Still deploying"), agent="coder"),
        ]
    )


def jsonl_keeps_an_index(tmp_path: Path) -> bool:
    """Whether a JSONL directory store keeps a catalog index (the JSONL tests run once it
    does)."""
    store = ags.open_store(tmp_path / "probe")
    try:
        return getattr(store, "_index", None) is not None
    finally:
        store.close()
