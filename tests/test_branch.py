"""Branches (``session.branch``): a session sharing another's history up to a point without
copying it, diverging with its own appends; listed, deleted and shredded with its origin,
encrypted with the origin's key for the shared part, copied across backends as a branch, and
the async API. On memory, JSONL, SQLite and PostgreSQL (the latter needs
``AGENTSESSION_TEST_POSTGRES_DSN``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsession as ags
from agentsession.aio import open_async_store
from agentsession.branching import BranchRef
from agentsession.errors import DuplicateSession, UsageError
from agentsession.events import SESSION_BRANCH, SessionBranch

from .store_urls import store_url


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


def texts(session: ags.BaseSession) -> list[str]:
    return [m.text for m in session.messages()]


def turns(session: ags.BaseSession, count: int, tag: str = "") -> list[int]:
    seqs = []
    for i in range(count):
        with session.turn() as turn:
            seqs.append(turn.user(f"q{tag}{i}"))
            turn.assistant(f"a{tag}{i}")
    return seqs


def test_a_branch_shares_the_history_up_to_its_point_and_diverges(url: str) -> None:
    with ags.open_store(url) as store:
        origin = store.get("o")
        users = turns(origin, 3)
        branch = origin.branch(at_turn=users[1], id="o-b")
        assert branch.origin == BranchRef("o", users[1] + 2)
        assert origin.branches() == [BranchRef("o-b", users[1] + 2)]
        assert texts(branch) == ["q0", "a0", "q1", "a1"]
        assert branch.latest_seq == users[1] + 3  # the marker, after the shared part
        turns(branch, 1, "b")
        turns(origin, 1, "o")
        assert texts(branch) == ["q0", "a0", "q1", "a1", "qb0", "ab0"]
        assert texts(origin) == ["q0", "a0", "q1", "a1", "q2", "a2", "qo0", "ao0"]
        log = branch.read()
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert log[: users[1] + 2] == origin.read()[: users[1] + 2]  # the origin's own events
        marker = log[users[1] + 2]
        assert marker.type == SESSION_BRANCH
        assert marker.decode(SessionBranch) == SessionBranch(
            origin="o", origin_seq=users[1] + 2, min_revision=6
        )
        assert [e.seq for e in branch.read(after=users[1], limit=3)] == [
            users[1] + 1, users[1] + 2, users[1] + 3
        ]
    if url != "memory:":
        with ags.open_store(url) as again:  # a fresh store finds the branch from its log
            fresh = again.get("o-b")
            assert fresh.origin == BranchRef("o", users[1] + 2)
            assert texts(fresh) == ["q0", "a0", "q1", "a1", "qb0", "ab0"]
            assert again.get("o").branches() == [BranchRef("o-b", users[1] + 2)]


def test_where_a_branch_starts(url: str) -> None:
    with ags.open_store(url) as store:
        origin = store.get("o")
        users = turns(origin, 2)
        head = origin.branch()
        assert head.origin == BranchRef("o", origin.latest_seq) and len(texts(head)) == 4
        inside = origin.branch(at_seq=users[1] + 1)  # in turn 1: before it
        assert inside.origin == BranchRef("o", users[1] - 2)
        assert texts(inside) == ["q0", "a0"]
        empty = origin.branch(at_seq=0, id="from-nothing")
        assert texts(empty) == [] and empty.latest_seq == 1
        with pytest.raises(DuplicateSession):
            origin.branch(id="from-nothing")
        store.get("taken").append(ags.Event.new("app/x", {}))
        with pytest.raises(DuplicateSession):
            origin.branch(id="taken")  # the index is not touched either
        listed = store._meta_get("branches", "o") or ""
        assert listed.count('"from-nothing"') == 1 and '"taken"' not in listed
        with pytest.raises(UsageError, match="own"):
            origin.branch(id="o")
        with pytest.raises(UsageError):
            origin.branch(at_seq=1, at_turn=users[0])
        with pytest.raises(UsageError):
            origin.branch(at_seq=999)
        with pytest.raises(UsageError, match="nothing to branch"):
            store.get("never").branch()
        running = origin.turn()
        running.__enter__()
        during = origin.branch()  # a running turn is left out
        running.__exit__(None, None, None)
        assert during.origin == BranchRef("o", users[1] + 2)


def test_rewinds_compaction_and_branches_of_branches(url: str) -> None:
    with ags.open_store(url) as store:
        origin = store.get("o")
        users = turns(origin, 3)
        branch = origin.branch(id="b1")
        branch.rewind(to_turn=users[0])  # back into the shared part
        assert texts(branch) == ["q0", "a0"]
        turns(branch, 1, "b")
        assert texts(branch) == ["q0", "a0", "qb0", "ab0"]
        assert texts(origin) == ["q0", "a0", "q1", "a1", "q2", "a2"]  # untouched
        nested = branch.branch(id="b2")
        assert nested.origin == BranchRef("b1", branch.latest_seq)
        turns(nested, 1, "n")
        assert texts(nested) == ["q0", "a0", "qb0", "ab0", "qn0", "an0"]
        assert nested.compact("S", keep_turns=1) is not None
        assert texts(nested) == ["S", "qn0", "an0"]
        with ags.open_store(url) if url != "memory:" else _same(store) as again:
            assert texts(again.get("b2")) == ["S", "qn0", "an0"]
            assert texts(again.get("b1")) == ["q0", "a0", "qb0", "ab0"]


class _same:
    def __init__(self, store: ags.BaseStore) -> None:
        self.store = store

    def __enter__(self) -> ags.BaseStore:
        return self.store

    def __exit__(self, *exc: object) -> None:
        pass


def test_deleting_an_origin_needs_recursive(url: str) -> None:
    with ags.open_store(url) as store:
        origin = store.get("o")
        turns(origin, 2)
        origin.branch(id="b1").branch(id="b2")
        with pytest.raises(UsageError, match="1 branch"):
            store.delete("o")
        assert store.exists("o") and store.exists("b1")
        store.delete("b2")  # a branch without branches goes alone, and leaves the index
        assert store.get("b1").branches() == []
        store.get("b1").branch(id="b3")
        assert store.delete("o", recursive=True)
        assert not any(store.exists(s) for s in ("o", "b1", "b3"))


def test_reading_a_branchs_latest_events_reads_nothing_of_its_origin(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ags.open_store(url)
    origin = store.get("o")
    turns(origin, 50)
    branch = origin.branch(id="b")
    turns(branch, 10, "b")
    if url != "memory:":
        store.close()
        store = ags.open_store(url)  # a fresh store: nothing in memory
    calls: list[int] = []
    real = ags.BaseSession._origin_read

    def counting(self: ags.BaseSession, origin: str, after: int, count: int) -> list[ags.Event]:
        calls.append(count)
        return real(self, origin, after, count)

    monkeypatch.setattr(ags.BaseSession, "_origin_read", counting)
    try:
        fresh = store.get("b")
        latest = fresh.read(after=fresh.latest_seq - 20)
        assert len(latest) == 20 and latest[-1].seq == fresh.latest_seq
        assert calls == []
        assert len(texts(fresh)) == 120  # the history reads the shared part, once
        assert len(texts(fresh)) == 120
        assert calls == [200]
    finally:
        store.close()


def test_a_branch_of_a_long_session_stores_one_small_event(tmp_path: Path) -> None:
    with ags.open_store(tmp_path) as store:
        origin = store.get("o")
        origin.append_many([ags.Event.new("app/x", {"i": i}) for i in range(5000)])
        before = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
        branch = origin.branch(id="b")
        after = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
        assert branch.latest_seq == 5001
        assert after - before < 1024  # the marker (and the branch index entry)


def test_an_encrypted_branch_reads_the_shared_part_with_the_origins_key(
    tmp_path: Path,
) -> None:
    pytest.importorskip("cryptography")
    url = str(tmp_path / "enc")
    with ags.open_store(url, passphrase="correct horse") as store:
        origin = store.get("o")
        users = turns(origin, 2)
        branch = origin.branch(at_turn=users[0], id="b")
        turns(branch, 1, "b")
        assert texts(branch) == ["q0", "a0", "qb0", "ab0"]
    logs = list((tmp_path / "enc").rglob("*.jsonl"))
    assert len(logs) == 2
    assert not any(b'"parts"' in p.read_bytes() for p in logs)  # every message sealed
    with ags.open_store(url, passphrase="correct horse") as store:
        assert texts(store.get("b")) == ["q0", "a0", "qb0", "ab0"]
        with pytest.raises(UsageError, match="branch"):
            store.shred("o")
        assert store.shred("o", recursive=True) == ["b", "o"]


@pytest.mark.parametrize("target", ["sqlite", "jsonl"])
def test_copy_store_copies_a_branch_as_a_branch(tmp_path: Path, target: str) -> None:
    src_url = str(tmp_path / "src") if target == "sqlite" else f"sqlite:///{tmp_path}/src.db"
    dst_url = f"sqlite:///{tmp_path}/dst.db" if target == "sqlite" else str(tmp_path / "dst")
    with ags.open_store(src_url) as src:
        origin = src.get("o")
        users = turns(origin, 3)
        branch = origin.branch(at_turn=users[0], id="b")
        turns(branch, 1, "b")
        with ags.open_store(dst_url) as dst:
            with pytest.raises(UsageError, match="copy it too"):
                ags.copy_store(src, dst, ids=["b"])
            report = ags.copy_store(src, dst, ids=["b", "o"])
            assert report.sessions == 2
            copied = dst.get("b")
            assert copied.origin == BranchRef("o", users[0] + 2)
            assert texts(copied) == ["q0", "a0", "qb0", "ab0"]
            assert dst.get("o").branches() == [BranchRef("b", users[0] + 2)]
            assert copied.read() == branch.read()


def test_the_async_api(tmp_path: Path) -> None:
    async def run() -> tuple[list[str], BranchRef | None, list[BranchRef]]:
        async with open_async_store(tmp_path / "a") as store:
            session = await store.get("o")
            async with session.turn() as turn:
                await turn.user("q0")
                await turn.assistant("a0")
            branch = await session.branch(id="b")
            async with branch.turn() as turn:
                await turn.user("qb")
            return (
                [m.text for m in await branch.messages()],
                branch.origin,
                await session.branches(),
            )

    messages, origin, branches = asyncio.run(run())
    assert messages == ["q0", "a0", "qb"]
    assert origin == BranchRef("o", 4)
    assert branches == [BranchRef("b", 4)]


def test_a_forged_index_entry_is_not_believed(tmp_path: Path) -> None:
    """The branch index is stored in clear: an entry naming a session that is not that
    branch is neither listed nor deleted with the origin."""
    with ags.open_store(tmp_path) as store:
        origin = store.get("o")
        turns(origin, 1)
        turns(store.get("victim"), 1)
        origin.branch(id="b")
        store._meta_set("branches", "o", '[["b",4],["victim",4]]')
        assert origin.branches() == [BranchRef("b", 4)]
        store._meta_set("branches", "o", '[["b",4],["victim",4]]')
        store.delete("o", recursive=True)
        assert store.exists("victim") and not store.exists("b")
