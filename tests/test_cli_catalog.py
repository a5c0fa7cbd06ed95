"""``agentsession ls`` with the catalog's options, ``search``, ``reindex`` and ``totals``.

They run on a memory store every command opening sees (``tests/catalog_store.py``: a scheme
registered for the test), whose catalog is the reference; the same commands on a JSONL
directory run once the JSONL backend keeps a catalog index (skipped until then, saying so).
Every answer is compared with the library's on the same store.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner

import agentsession as ags
import agentsession.registry
from agentsession.cli import _output as cli_output
from agentsession.cli import cli
from agentsession.cli.catalog import highlighted, parse_where_options
from agentsession.contract import SessionInfo
from agentsession.errors import UsageError

from .catalog_store import SCHEME, fill, jsonl_keeps_an_index, shared_factory

URL = f"{SCHEME}:"
OLD_HEADER = ["id", "events", "last", "activity", "(UTC)", "size"]


def invoke(*args: str, url: str = URL) -> tuple[int, str, str]:
    """Run the CLI on ``url``: exit code, stdout, stderr."""
    result = CliRunner().invoke(cli, ["--store", url, *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[ags.BaseStore]:
    """The shared memory store, filled (:func:`tests.catalog_store.fill`)."""
    factory = shared_factory()
    monkeypatch.setitem(agentsession.registry._registered, SCHEME, factory)
    opened = ags.open_store(URL)
    fill(opened)
    yield opened
    opened.close()


def ids_of(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:]]


def json_ids(out: str, key: str = "id") -> list[str]:
    return [json.loads(line)[key] for line in out.splitlines()]


def next_cursor(err: str) -> str | None:
    found = re.findall(r"^next_cursor: (\S+)$", err, flags=re.M)
    return found[-1] if found else None


# -- ls ---------------------------------------------------------------------------------------


def test_ls_without_catalog_options_keeps_its_columns_and_json(store: ags.BaseStore) -> None:
    code, out, _ = invoke("ls")
    assert code == 0
    assert out.splitlines()[0].split() == OLD_HEADER
    assert ids_of(out) == [info.id for info in store.list()]
    rows = [json.loads(line) for line in invoke("ls", "--json")[1].splitlines()]
    assert {tuple(sorted(row)) for row in rows} == {("id", "last_seq", "size", "updated_at")}


def test_ls_long_shows_the_catalog_columns(store: ags.BaseStore) -> None:
    code, out, err = invoke("ls", "-l")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == [
        "id", "events", "last", "activity", "(UTC)", "status", "messages", "turns", "tokens",
        "cost", "title",
    ]
    by_id = {line.split()[0]: line.split() for line in lines[1:]}
    first = by_id["chat:00"]
    assert first[4:9] == ["idle", "2", "1", "110", "-"]  # 100 in + 10 out, no price
    assert " ".join(first[9:]) == "The first session"
    assert " ".join(by_id["chat:05"][9:]) == "Please deploy build 5 to production"
    assert by_id["chat:open"][4] == "needs_recovery"  # a turn open, nobody holds its lock
    assert list(by_id) == [info.id for info in store.list(where={})]


def test_ls_json_of_the_catalog_has_every_session_info_field(store: ags.BaseStore) -> None:
    code, out, _ = invoke("ls", "--json", "--where", "id=chat:03")
    assert code == 0
    [row] = [json.loads(line) for line in out.splitlines()]
    assert set(row) == set(SessionInfo.__struct_fields__)
    [info] = store.list(where={"id": "chat:03"})
    assert row == json.loads(msgspec.json.encode(info))
    assert row["tags"] == ["billing", "ops"] and row["tenant"] == "globex"


WHERE_CASES: list[tuple[list[str], dict[str, Any]]] = [
    (["--where", "tenant=acme"], {"tenant": "acme"}),
    (["--where", "tenant=acme", "--tag", "billing"], {"tenant": "acme", "tags": ["billing"]}),
    (["--tag", "billing", "--tag", "ops"], {"tags": ["billing", "ops"]}),
    (["--where", "user=u0,u2"], {"user": ["u0", "u2"]}),
    (["--where", "user=u0", "--where", "user=u1"], {"user": ["u0", "u1"]}),
    (["--where", "agent=coder", "--where", "tenant=globex"],
     {"agent": "coder", "tenant": "globex"}),
    (["--status", "idle"], {"status": "idle"}),
    (["--status", "needs_recovery"], {"status": "needs_recovery"}),
    (["--where", "status=live,needs_recovery"], {"status": ["live", "needs_recovery"]}),
    (["--where", "id=chat:01,chat:04,nosuch"], {"id": ["chat:01", "chat:04", "nosuch"]}),
    (["--where", "title=FIRST"], {"title": "FIRST"}),
    (["--where", "tenant=nobody"], {"tenant": "nobody"}),
]


@pytest.mark.parametrize(("args", "where"), WHERE_CASES, ids=[" ".join(c[0]) for c in WHERE_CASES])
def test_ls_filters_as_the_library_does(
    store: ags.BaseStore, args: list[str], where: dict[str, Any]
) -> None:
    code, out, err = invoke("ls", "--json", *args)
    assert code == 0, err
    assert json_ids(out) == [info.id for info in store.list(where=where)]
    code, out, err = invoke("ls", *args)
    expected = [info.id for info in store.list(where=where)]
    assert code == 0 and (ids_of(out) == expected or (not expected and "no sessions" in out))


@pytest.mark.parametrize("order", ["updated", "created", "id"])
def test_ls_pages_with_cursors_through_every_session_once(
    store: ags.BaseStore, order: str
) -> None:
    seen: list[str] = []
    cursor: list[str] = []
    pages = 0
    while True:
        code, out, err = invoke("ls", "--json", "--order", order, "--limit", "5", *cursor)
        assert code == 0, err
        seen += json_ids(out)
        pages += 1
        found = next_cursor(err)
        if found is None:
            break
        cursor = ["--cursor", found]
    assert seen == [info.id for info in store.list(where={}, order=order)]
    assert pages == 3  # 13 sessions, 5 a page


def test_ls_tree_takes_the_catalog_options(store: ags.BaseStore) -> None:
    code, out, err = invoke("ls", "--tree", "--where", "tenant=acme", "--limit", "2")
    assert code == 0, err
    assert ids_of(out) == [info.id for info in store.list(where={"tenant": "acme"}, limit=2)]
    assert next_cursor(err) is not None


BAD_OPTIONS = [
    (["--where", "tenant"], "expected FIELD=VALUE"),
    (["--where", "=acme"], "expected FIELD=VALUE"),
    (["--where", "colour=red"], "unknown field 'colour'"),
    (["--where", "tag=x"], "tags go in --tag"),
    (["--where", "tenant="], "an empty value"),
    (["--where", "user=a,,b"], "an empty value"),
    (["--where", "title=a", "--where", "title=b"], "given twice"),
    (["--status", "asleep"], "unknown status 'asleep' (statuses: live, idle"),
    (["--where", "status=idle,gone"], "unknown status 'gone'"),
    (["--tag", ""], "an empty tag"),
    (["--order", "size"], "'size' is not one of 'updated', 'created', 'id'"),
    (["--cursor", "garbage!"], "cursor is not one this store made"),
]


@pytest.mark.parametrize(
    ("args", "message"), BAD_OPTIONS, ids=[" ".join(c[0]) for c in BAD_OPTIONS]
)
def test_a_bad_catalog_option_is_a_usage_error_saying_what_is_expected(
    store: ags.BaseStore, args: list[str], message: str
) -> None:
    code, out, err = invoke("ls", *args)
    assert code == 2 and out == ""
    assert message in err


def test_a_cursor_of_another_order_is_refused(store: ags.BaseStore) -> None:
    cursor = next_cursor(invoke("ls", "--json", "--order", "id", "--limit", "1")[2])
    assert cursor is not None
    code, _, err = invoke("ls", "--cursor", cursor)
    assert code == 2 and "another listing or order" in err


def test_the_where_options_parse_into_the_librarys_where() -> None:
    assert parse_where_options(()) is None
    assert parse_where_options(["tenant=a, b", "title=x=y"], ["t1", "t1"], ["idle,live"]) == {
        "tenant": ["a", "b"],
        "status": ["idle", "live"],
        "tags": ["t1"],
        "title": "x=y",
    }
    with pytest.raises(UsageError, match="unknown field"):
        parse_where_options(["updated=2026-01-01"])


def test_catalog_options_on_a_store_without_a_catalog_index_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(agentsession.registry._registered, SCHEME, shared_factory(index=False))
    with ags.open_store(URL) as plain:
        plain.get("a").append(ags.Event.new("user/message", ags.Message.user("deploy")))
    assert invoke("ls")[0] == 0  # the listing needs no catalog
    for args in (["ls", "-l"], ["ls", "--where", "tenant=acme"], ["ls", "--order", "id"],
                 ["search", "deploy"], ["totals"], ["reindex"]):
        code, out, err = invoke(*args)
        assert code == 2 and out == "", args
        assert "keeps no catalog index" in err, args


# -- search -----------------------------------------------------------------------------------


def test_search_lists_hits_with_session_seq_role_rank_flags_and_snippet(
    store: ags.BaseStore,
) -> None:
    code, out, err = invoke("search", "deploy production")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["session", "seq", "role", "rank", "flags", "snippet"]
    hits = store.search("deploy production")
    assert len(lines) == len(hits) + 1
    for line, hit in zip(lines[1:], hits, strict=True):
        cells = line.split()
        assert cells[:3] == [hit.session_id, str(hit.seq), hit.role]
        assert cells[3] == f"{hit.rank:.3f}" and cells[4] == "-"
        assert line.endswith(hit.snippet)
    assert "[deploy] build 3 to [production]" in out


def test_search_json_session_where_limit_and_cursor(store: ags.BaseStore) -> None:
    code, out, _ = invoke("search", "build", "--json", "--session", "chat:03")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert set(rows[0]) == {"session_id", "seq", "role", "snippet", "rank", "rewound", "compacted"}
    assert [(r["session_id"], r["seq"]) for r in rows] == [
        (h.session_id, h.seq) for h in store.search("build", session_id="chat:03")
    ]
    where = {"tenant": "acme", "tags": ["billing"]}
    code, out, _ = invoke("search", "invoice", "--json", "--where", "tenant=acme", "--tag",
                          "billing")
    assert json_ids(out, "session_id") == [h.session_id for h in store.search("invoice",
                                                                                where=where)]
    seen: list[tuple[str, int]] = []
    cursor: list[str] = []
    while True:
        code, out, err = invoke("search", "deploy", "--json", "--limit", "4", *cursor)
        assert code == 0, err
        seen += [(json.loads(line)["session_id"], json.loads(line)["seq"])
                 for line in out.splitlines()]
        found = next_cursor(err)
        if found is None:
            break
        cursor = ["--cursor", found]
    assert seen == [(h.session_id, h.seq) for h in store.search("deploy", limit=100)]


def test_search_flags_rewound_and_compacted_events(store: ags.BaseStore) -> None:
    session = store.get("flags:one")
    for text in ("zebra first", "zebra second", "zebra third"):
        with session.turn(agent="coder") as turn:
            turn.user(text)
            turn.assistant("ok")
    session.rewind(to_turn=1)
    for text in ("zebra fourth", "zebra fifth"):
        with session.turn(agent="coder") as turn:
            turn.user(text)
            turn.assistant("ok")
    session.compact("summary", keep_turns=1)
    code, out, _ = invoke("search", "zebra", "--session", "flags:one")
    assert code == 0
    flags = {line.split()[1]: line.split()[4] for line in out.splitlines()[1:]}
    hits = {str(h.seq): h for h in store.search("zebra", session_id="flags:one")}
    assert set(flags) == set(hits)
    for seq, hit in hits.items():
        expected = [n for n, on in (("rewound", hit.rewound), ("compacted", hit.compacted)) if on]
        assert flags[seq] == (",".join(expected) or "-")
    assert any(h.rewound for h in hits.values()) and any(h.compacted for h in hits.values())


def test_search_highlights_the_words_found_on_a_terminal(
    store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: True)
    code, out, _ = invoke("search", "deploy", "--session", "chat:02")
    assert code == 0
    assert "Please deploy build 2" in out and "[deploy]" not in out
    text = highlighted("a [b] [c]d [É] f[g] [x]", ["b", "c", "e", "g"])
    assert text.plain == "a b [c]d É f[g] [x]"  # marks are whole words of the query
    styled = [(text.plain[s.start : s.end], str(s.style)) for s in text.spans]
    assert styled == [("b", "bold reverse"), ("É", "bold reverse")]


def test_search_text_cannot_drive_the_terminal_nor_be_read_as_markup(
    store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store.get("evil").turn(agent="coder") as turn:
        turn.user("walrus \x1b[31mred[/] [bold]walrus[/bold]")
    for terminal in (False, True):
        monkeypatch.setattr(cli_output, "is_terminal", lambda stream, t=terminal: t)
        code, out, _ = invoke("search", "walrus")
        assert code == 0 and "\x1b" not in out and "\\x1b" in out
        assert "[bold]" in out and "[/]" in out
    assert highlighted("[/x] [walrus]", ["walrus"]).plain == "[/x] walrus"


def test_search_errors(store: ags.BaseStore) -> None:
    assert invoke("search", "deploy", "--session", "chat:99")[0] == 4
    code, _, err = invoke("search", "...")
    assert code == 2 and "has no words" in err
    code, _, err = invoke("search", "deploy", "--status", "live")
    assert code == 2 and "live or needs_recovery" in err
    assert invoke("search", "deploy", "--limit", "0")[0] == 2
    code, out, _ = invoke("search", "xylophone")
    assert code == 0 and out == "no hits\n"


# -- reindex, totals --------------------------------------------------------------------------


def test_reindex_rebuilds_what_the_index_lost(store: ags.BaseStore) -> None:
    index = store._index
    assert index is not None
    before = store.list(where={})
    index.delete("chat:03")  # type: ignore[attr-defined]
    index.delete("chat:04")  # type: ignore[attr-defined]
    assert "chat:03" not in json_ids(invoke("ls", "--json", "-l")[1])
    code, out, err = invoke("reindex", "chat:03")
    assert code == 0, err
    assert out == "reindexed 1 session(s) in memory:\n"
    assert "chat:03" in json_ids(invoke("ls", "--json", "-l")[1])
    code, out, _ = invoke("reindex", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["session_id"] for r in rows} == {i.id for i in before}
    assert all(r["reindexed"] for r in rows)
    after = store.list(where={})
    assert [(i.id, i.messages, i.usage, i.tags) for i in after] == [
        (i.id, i.messages, i.usage, i.tags) for i in before
    ]
    code, _, err = invoke("reindex", "chat:3")
    assert code == 4 and "did you mean 'chat:03'" in err


def test_reindex_draws_its_progress_on_a_terminal_stderr(
    store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: stream is sys.stderr)
    for args in ([], ["chat:01", "chat:02"]):
        code, out, err = invoke("reindex", *args)
        assert code == 0
        assert "reindexing" in err
        assert out == f"reindexed {len(args) or len(store.list())} session(s) in memory:\n"


@pytest.mark.parametrize("group_by", ["tenant", "user", "agent", "day"])
def test_totals_sum_usage_as_the_library_does(store: ags.BaseStore, group_by: str) -> None:
    code, out, err = invoke("totals", "--group-by", group_by, "--json")
    assert code == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    expected = store.totals(group_by=group_by)
    assert got == [json.loads(msgspec.json.encode(t)) for t in expected]
    code, out, _ = invoke("totals", "--group-by", group_by)
    lines = out.splitlines()
    assert lines[0].split()[:3] == [group_by, "sessions", "calls"]
    assert [line.split()[3] for line in lines[1:]] == [str(t.usage.input_tokens)
                                                        for t in expected]


def test_totals_where_and_days(store: ags.BaseStore) -> None:
    code, out, _ = invoke("totals", "--group-by", "user", "--where", "tenant=acme", "--json")
    assert json_ids(out, "key") == [t.key for t in store.totals(group_by="user",
                                                                 where={"tenant": "acme"})]
    today = store.list(where={})[0].updated_at
    assert today is not None
    day = today.date().isoformat()
    assert invoke("totals", "--since", day, "--json")[1] == invoke("totals", "--json")[1]
    assert invoke("totals", "--until", day)[1] == "no usage recorded\n"
    code, _, err = invoke("totals", "--since", "yesterday")
    assert code == 2 and "yesterday" in err
    assert invoke("totals", "--group-by", "model")[0] == 2


def test_prices_give_the_cost_columns(store: ags.BaseStore) -> None:
    store.set_prices({"*": ags.listing.Price(input=1.0, output=2.0)})
    store.reindex(["chat:00"])
    line = next(ln for ln in invoke("ls", "-l")[1].splitlines() if ln.startswith("chat:00 "))
    assert line.split()[8] == f"{(100 * 1.0 + 10 * 2.0) / 1_000_000:.4f}"


# -- a JSONL directory, once its catalog index exists -----------------------------------------


@pytest.fixture
def jsonl_store(tmp_path: Path) -> str:
    if not jsonl_keeps_an_index(tmp_path):
        pytest.skip("the JSONL backend keeps no catalog index yet (runs once it does)")
    url = str(tmp_path / "store")
    opened = ags.open_store(url)
    fill(opened)
    opened.close()
    return url


def test_jsonl_ls_where_search_totals_and_reindex(jsonl_store: str) -> None:
    store = ags.open_store(jsonl_store, create=False)
    try:
        code, out, err = invoke("ls", "--json", "--where", "tenant=acme", "--tag", "billing",
                                url=jsonl_store)
        assert code == 0, err
        where = {"tenant": "acme", "tags": ["billing"]}
        assert json_ids(out) == [i.id for i in store.list(where=where)]
        code, out, _ = invoke("search", "deploy production", "--json", url=jsonl_store)
        assert code == 0
        assert json_ids(out, "session_id") == [h.session_id for h in
                                                store.search("deploy production")]
        code, out, _ = invoke("totals", "--json", url=jsonl_store)
        assert code == 0 and json_ids(out, "key") == [t.key for t in store.totals()]
        code, out, err = invoke("reindex", url=jsonl_store)
        assert code == 0, err
        assert out == f"reindexed {len(store.list())} session(s) in {store.location}\n"
    finally:
        store.close()


# -- an encrypted store -----------------------------------------------------------------------


def test_an_encrypted_store_is_listed_and_searched_with_its_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(agentsession.registry._registered, SCHEME, shared_factory())
    with ags.open_store(URL, passphrase="correct horse") as sealed:
        fill(sealed, count=4)
        index = sealed._index
        assert index is not None
        stored = index.query(ags.listing.ListQuery(limit=None))  # type: ignore[attr-defined]
        assert "acme" not in {row.tenant for row in stored}  # sealed in the index
    key = tmp_path / "key"
    key.write_text("correct horse\n")
    keyed = ["--key-file", str(key)]
    code, out, err = invoke(*keyed, "ls", "--json", "--where", "tenant=acme")
    assert code == 0, err
    assert [json.loads(line)["tenant"] for line in out.splitlines()] == ["acme", "acme"]
    code, out, err = invoke(*keyed, "search", "deploy production", "--where", "tenant=globex")
    assert code == 0, err
    assert ids_of(out) == ["chat:01", "chat:03"]
    assert "Please [deploy] build 1 to [production]" in out  # made from the opened event
    code, _, err = invoke(*keyed, "ls", "--where", "title=first")
    assert code == 2 and "needs the titles in clear" in err
    code, _, err = invoke("ls", "-l")
    assert code == 1 and "--key-file" in err
