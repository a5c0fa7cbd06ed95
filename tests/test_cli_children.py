"""Child sessions on the command line (show, ls --tree, rm -r) and their transcript rows."""

from __future__ import annotations

import ast
import datetime as dt
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

import agentsession as ags
import agentsession.children as children_module
import agentsession.view as view
from agentsession import events as ev
from agentsession.children import ChildInfo
from agentsession.cli import _output as cli_output
from agentsession.cli import cli
from agentsession.errors import SessionShredded
from agentsession.events import Event
from agentsession.messages import Message
from agentsession.view import (
    PREVIEW_CHARS,
    DiscardRow,
    EventRow,
    ForkRow,
    MergeRow,
    SubagentEndRow,
    SubagentStartRow,
    transcript_rows,
)

T0 = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


def invoke(store: str, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        cli, ["--store", store, *args], input=input, env={"COLUMNS": "200"}
    )
    return result.exit_code, result.stdout, result.stderr


# -- the rows ---------------------------------------------------------------------------------


def numbered(*events: Event) -> list[Event]:
    """The events with seqs 1, 2, 3 ... and one time, as a store would stamp them."""
    return [msgspec.structs.replace(e, seq=i, time=T0) for i, e in enumerate(events, 1)]


def child_log() -> list[Event]:
    """A child's log: its fork, one turn, its merge, then a discard mark (a log the library
    would not write, to check that each row reads its own event)."""
    return numbered(
        Event.new(
            ev.SESSION_FORK,
            ev.SessionFork(
                parent="main",
                parent_seq=4,
                fork_id="f1",
                agent="researcher",
                task="dig",
                inherit=-1,
                messages=[Message.user("hello"), Message.assistant("hi")],
            ),
            agent="researcher",
        ),
        Event.new(ev.TURN_START, ev.TurnStart(), agent="researcher"),
        Event.new(ev.USER_MESSAGE, Message.user("look"), agent="researcher"),
        Event.new(ev.TURN_END, ev.TurnEnd(steps=0), agent="researcher"),
        Event.new(
            ev.SESSION_MERGE,
            ev.SessionMerge(parent="main", fork_id="f1", parent_seq=9, mode="messages", messages=2),
            agent="researcher",
        ),
        Event.new(
            ev.SESSION_DISCARD,
            ev.SessionDiscard(parent="main", fork_id="f1", parent_seq=10, reason="stale"),
            agent="researcher",
        ),
    )


def test_fork_merge_and_discard_rows_carry_what_their_events_say() -> None:
    fork, _, _, _, merge, discard = transcript_rows(child_log())
    assert fork == ForkRow(
        seq=1,
        depth=0,
        agent="researcher",
        time=T0,
        parent="main",
        parent_seq=4,
        fork_id="f1",
        subagent="researcher",
        task="dig",
        inherited_messages=2,
    )
    assert merge == MergeRow(
        seq=5,
        depth=0,
        agent="researcher",
        time=T0,
        parent="main",
        parent_seq=9,
        fork_id="f1",
        mode="messages",
        messages=2,
    )
    assert discard == DiscardRow(
        seq=6,
        depth=0,
        agent="researcher",
        time=T0,
        parent="main",
        parent_seq=10,
        fork_id="f1",
        reason="stale",
    )


def test_a_fork_task_and_a_discard_reason_are_previews_unless_full() -> None:
    long = "x" * 500
    events = numbered(
        Event.new(
            ev.SESSION_FORK, ev.SessionFork(parent="p", parent_seq=1, fork_id="f", task=long)
        ),
        Event.new(ev.SESSION_DISCARD, ev.SessionDiscard(parent="p", fork_id="f", reason=long)),
    )
    fork, discard = transcript_rows(events)
    assert isinstance(fork, ForkRow) and isinstance(discard, DiscardRow)
    assert len(fork.task) == len(discard.reason) == PREVIEW_CHARS
    assert fork.task.endswith("…") and discard.reason.endswith("…")
    fork, discard = transcript_rows(events, full=True)
    assert isinstance(fork, ForkRow) and isinstance(discard, DiscardRow)
    assert fork.task == discard.reason == long


def test_the_parents_linking_rows_carry_the_fork_and_the_merge_from_the_meta() -> None:
    start, merged, dropped, plain = transcript_rows(
        numbered(
            Event.new(
                ev.SUBAGENT_START,
                ev.SubagentStart(agent="researcher", session="main:r", task="dig"),
                meta={"fork_id": "f1"},
            ),
            Event.new(
                ev.SUBAGENT_END,
                ev.SubagentEnd(agent="researcher", session="main:r", status="merged"),
                meta={"fork_id": "f1", "mode": "messages", "messages": 3},
            ),
            Event.new(
                ev.SUBAGENT_END,
                ev.SubagentEnd(
                    agent="critic", session="main:c", status="discarded", summary="stale"
                ),
                meta={"fork_id": "f2"},
            ),
            Event.new(
                ev.SUBAGENT_END,
                ev.SubagentEnd(agent="old", session="s", status="completed", steps=2),
            ),
        )
    )
    assert isinstance(start, SubagentStartRow)
    assert (start.child_session, start.fork_id) == ("main:r", "f1")
    assert isinstance(merged, SubagentEndRow)
    assert (merged.status, merged.child_session, merged.fork_id) == ("merged", "main:r", "f1")
    assert (merged.merge_mode, merged.merged_messages) == ("messages", 3)
    assert isinstance(dropped, SubagentEndRow)
    assert (dropped.status, dropped.summary, dropped.fork_id) == ("discarded", "stale", "f2")
    assert (dropped.merge_mode, dropped.merged_messages) == ("", 0)
    assert isinstance(plain, SubagentEndRow)
    assert (plain.fork_id, plain.merge_mode, plain.merged_messages, plain.steps) == ("", "", 0, 2)


def test_meta_of_the_wrong_type_is_ignored_not_trusted() -> None:
    (end,) = transcript_rows(
        numbered(
            Event.new(
                ev.SUBAGENT_END,
                ev.SubagentEnd(status="merged"),
                meta={"fork_id": 7, "mode": ["x"], "messages": True},
            )
        )
    )
    assert isinstance(end, SubagentEndRow)
    assert (end.fork_id, end.merge_mode, end.merged_messages) == ("", "", 0)


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        (ev.SESSION_FORK, b"{}"),  # parent, parentSeq and forkId are required
        (ev.SESSION_MERGE, b'{"parent": 1}'),
        (ev.SESSION_DISCARD, b"[]"),
    ],
)
def test_a_broken_fork_merge_or_discard_payload_becomes_a_generic_row(
    kind: str, data: bytes
) -> None:
    (row,) = transcript_rows(numbered(Event(type=kind, data=msgspec.Raw(data))))
    assert isinstance(row, EventRow) and (row.type, row.data) == (kind, data.decode())


def test_fork_rows_encode_as_json_tagged_by_kind_and_decode_back() -> None:
    rows = transcript_rows(child_log())
    encoded = json.loads(msgspec.json.encode(rows))
    assert [item["kind"] for item in encoded] == [
        "fork",
        "turn_start",
        "user_message",
        "turn_end",
        "merge",
        "discard",
    ]
    assert encoded[0]["parent_seq"] == 4 and encoded[0]["inherited_messages"] == 2
    assert msgspec.json.decode(msgspec.json.encode(rows), type=list[view.AnyRow]) == rows


def test_the_new_rows_are_exported_and_every_field_has_a_docstring() -> None:
    tree = ast.parse(Path(view.transcript.__file__).read_text(encoding="utf-8"))
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for cls in (ForkRow, MergeRow, DiscardRow, SubagentStartRow, SubagentEndRow):
        assert cls.__name__ in view.__all__ and cls.__struct_config__.tag == cls.kind
        body = classes[cls.__name__].body
        documented = {
            statement.target.id
            for statement, after in itertools.pairwise(body)
            if isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        }
        own = set(cls.__struct_fields__) - set(view.Row.__struct_fields__)
        assert own <= documented, (cls.__name__, own - documented)


# -- a store with a family of sessions -------------------------------------------------------


@pytest.fixture(params=["jsonl", "sqlite"])
def family(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store holding ``main`` with three children: ``main:research`` (merged, with a child
    of its own, ``main:research:helper``, active) and ``main:critic`` (discarded); and an
    unrelated ``other``. Returns its URL."""
    url = str(tmp_path / "s") if request.param == "jsonl" else f"sqlite:///{tmp_path / 's.db'}"
    store = ags.open_store(url)
    main = store.get("main")
    with main.turn(agent="lead") as turn:  # seqs 1-4
        turn.user("plan the trip")
        turn.assistant("delegating")
    research = main.fork(  # main's seq 5
        "researcher", inherit="all", task="find \x1b[31mflights", child_id="main:research"
    )
    with research.turn(agent="researcher") as turn:  # its seqs 2-5
        turn.user("look")
        turn.assistant("found 3 flights")
    research.fork("helper", inherit=1, task="check prices", child_id="main:research:helper")
    critic = main.fork("critic", task="judge", child_id="main:critic")  # main's seq 6
    research.merge()  # main's seqs 7-9
    critic.discard("not needed\x07")  # main's seq 10
    with store.get("other").turn(agent="x") as turn:
        turn.user("hi")
    store.close()
    return url


def body(out: str) -> list[str]:
    """The lines of a plain transcript, without the header, stripped."""
    return [line.strip() for line in out.splitlines()[1:] if line.strip()]


# -- show -------------------------------------------------------------------------------------


def test_show_of_a_parent_names_each_child_session_at_its_fork_and_its_end(family: str) -> None:
    code, out, _ = invoke(family, "show", "main")
    assert code == 0
    lines = body(out)
    assert lines[4:] == [
        "5 subagent researcher started in session main:research: find \\x1b[31mflights",
        "6 subagent critic started in session main:critic: judge",
        "7 user (researcher): look",
        "8 assistant (researcher): found 3 flights",
        "9 subagent researcher merged from session main:research: 2 message(s) written here",
        "10 subagent critic discarded (session main:critic, nothing of it written here): "
        "not needed\\x07",
    ]
    assert "forked" not in out.splitlines()[1]  # a parent that is not a child has no such line


def test_show_of_a_child_starts_with_its_parent_and_fork_seq(family: str) -> None:
    code, out, _ = invoke(family, "show", "main:research")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("session main:research · 7 events · 1 turn · ")
    assert lines[1] == (
        "child of session main, forked at its seq 4 for subagent researcher · merged into it "
        "at its seq 9"
    )
    rows = body(out)
    assert rows[1] == (
        "1  FORK  from session main at its seq 4 for subagent researcher · 2 message(s) "
        "inherited · task: find \\x1b[31mflights"
    )
    assert rows[-2] == (
        "6 subagent helper started in session main:research:helper: check prices"
    )
    assert rows[-1] == "7  MERGED  into session main: 2 message(s), ending at its seq 9"
    assert "\x1b" not in out


def test_show_of_a_discarded_and_an_active_child(family: str) -> None:
    out = invoke(family, "show", "main:critic")[1]
    assert out.splitlines()[1] == (
        "child of session main, forked at its seq 5 for subagent critic · discarded (noted at "
        "its seq 10)"
    )
    assert body(out)[-1] == "2  DISCARDED  session main noted it at its seq 10: not needed\\x07"
    assert "\x07" not in out
    out = invoke(family, "show", "main:research:helper")[1]
    assert out.splitlines()[1] == (
        "child of session main:research, forked at its seq 5 for subagent helper · active "
        "(neither merged nor discarded)"
    )
    assert body(out)[-1] == (
        "1  FORK  from session main:research at its seq 5 for subagent helper · 1 message(s) "
        "inherited · task: check prices"
    )


def test_show_on_a_terminal_draws_the_fork_lines_escaped(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: True)
    code, out, _ = invoke(family, "show", "main:research")
    assert code == 0
    assert "child of session main, forked at its seq 4" in out
    assert "FORK" in out and "MERGED" in out and "\\x1b[31mflights" in out
    assert "\x1b" not in out  # CliRunner's output is no terminal: Rich draws no colours
    code, out, _ = invoke(family, "show", "main")
    assert "merged from session main:research" in out
    assert "not needed\\x07" in out and "\x07" not in out


def test_show_json_prints_the_fork_events_as_stored(family: str) -> None:
    code, out, _ = invoke(family, "show", "main:research", "--json")
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["type"] == "session/fork"
    assert events[0]["data"]["parent"] == "main" and events[0]["data"]["parentSeq"] == 4
    assert events[-1]["type"] == "session/merge" and events[-1]["data"]["parentSeq"] == 9


def test_show_json_rows_gives_the_rows_with_snake_case_keys(family: str) -> None:
    code, out, _ = invoke(family, "show", "main:research", "--json", "--rows")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[0]["kind"] == "fork"
    assert {k: rows[0][k] for k in ("parent", "parent_seq", "subagent", "inherited_messages")} == {
        "parent": "main",
        "parent_seq": 4,
        "subagent": "researcher",
        "inherited_messages": 2,
    }
    assert rows[-1]["kind"] == "merge"
    assert (rows[-1]["parent_seq"], rows[-1]["mode"], rows[-1]["messages"]) == (9, "messages", 2)
    decoded = [msgspec.json.decode(line, type=view.AnyRow) for line in out.splitlines()]
    assert isinstance(decoded[0], ForkRow) and isinstance(decoded[-1], MergeRow)
    parent_out = invoke(family, "show", "main", "--json", "--rows")[1]
    parent = [json.loads(line) for line in parent_out.splitlines()]
    merged, discarded = parent[-2:]
    assert (merged["kind"], merged["status"], merged["child_session"]) == (
        "subagent_end",
        "merged",
        "main:research",
    )
    assert (merged["merge_mode"], merged["merged_messages"]) == ("messages", 2)
    assert (discarded["status"], discarded["summary"]) == ("discarded", "not needed\x07")
    assert parent[4]["kind"] == "subagent_start" and parent[4]["fork_id"]


def test_show_rows_without_json_is_a_usage_error(family: str) -> None:
    code, _, err = invoke(family, "show", "main", "--rows")
    assert code == 2 and "--rows goes with --json" in err


# -- ls --tree --------------------------------------------------------------------------------


def test_ls_tree_nests_children_under_parents_in_fork_order(family: str) -> None:
    code, out, _ = invoke(family, "ls", "--tree")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "id", "events", "last", "activity", "(UTC)", "size", "agent", "state"
    ]
    ids = [line.split()[0] for line in lines[1:]]
    indents = {line.split()[0]: len(line) - len(line.lstrip()) for line in lines[1:]}
    # "other" is the latest, "main" holds the rest in fork order, the helper under research.
    assert ids == ["other", "main", "main:research", "main:research:helper", "main:critic"]
    assert [indents[i] for i in ids] == [0, 0, 2, 4, 2]
    by_id = {line.split()[0]: line.split() for line in lines[1:]}
    assert by_id["main:research"][-2:] == ["researcher", "merged"]
    assert by_id["main:research:helper"][-2:] == ["helper", "active"]
    assert by_id["main:critic"][-2:] == ["critic", "discarded"]
    assert by_id["main"][-2:] == ["-", "-"]
    assert by_id["main:research"][1] == "7"


def test_ls_without_tree_is_unchanged_flat(family: str) -> None:
    lines = invoke(family, "ls")[1].splitlines()
    assert lines[0].split() == ["id", "events", "last", "activity", "(UTC)", "size"]
    assert sorted(line.split()[0] for line in lines[1:]) == [
        "main",
        "main:critic",
        "main:research",
        "main:research:helper",
        "other",
    ]
    assert all(line == line.lstrip() for line in lines)
    rows = [json.loads(line) for line in invoke(family, "ls", "--json")[1].splitlines()]
    assert all(set(r) == {"id", "last_seq", "updated_at", "size"} for r in rows)


def test_ls_tree_json_gives_one_nested_object_per_top_session(family: str) -> None:
    code, out, _ = invoke(family, "ls", "--tree", "--json")
    assert code == 0
    tops = [json.loads(line) for line in out.splitlines()]
    assert [t["id"] for t in tops] == ["other", "main"]
    main = tops[1]
    assert (main["agent"], main["state"], main["fork_seq"]) == (None, None, None)
    assert main["last_seq"] == 10

    def shape(node: dict[str, object]) -> object:
        kids = node["children"]
        assert isinstance(kids, list)
        return [(k["id"], k["agent"], k["state"], k["fork_seq"], shape(k)) for k in kids]

    assert shape(main) == [
        ("main:research", "researcher", "merged", 4, [
            ("main:research:helper", "helper", "active", 5, []),
        ]),
        ("main:critic", "critic", "discarded", 5, []),
    ]
    assert set(main) == {
        "id", "last_seq", "updated_at", "size", "agent", "state", "fork_seq", "shredded",
        "children",
    }
    assert main["shredded"] is False
    assert tops[0]["children"] == []


def test_ls_tree_puts_a_child_at_the_top_when_its_parent_is_not_listed(family: str) -> None:
    out = invoke(family, "ls", "--tree", "--prefix", "main:research")[1]
    lines = out.splitlines()[1:]
    assert [line.split()[0] for line in lines] == ["main:research", "main:research:helper"]
    assert lines[1].startswith("  main:research:helper")
    assert lines[0].split()[-2:] == ["-", "-"]  # its parent is not listed: a top session


def test_ls_tree_shows_a_child_the_limit_left_out_under_its_listed_parent(family: str) -> None:
    store = ags.open_store(family)
    store.get("main").append(Event.new(ev.USER_MESSAGE, Message.user("later")))  # latest now
    store.close()
    out = invoke(family, "ls", "--tree", "--json", "--prefix", "main", "--limit", "1")[1]
    [main] = [json.loads(line) for line in out.splitlines()]
    assert main["id"] == "main" and main["last_seq"] == 11
    assert [c["id"] for c in main["children"]] == ["main:research", "main:critic"]
    research = main["children"][0]
    # Not listed: what only the listing reports is unknown, what the index says is there.
    assert (research["last_seq"], research["size"], research["state"]) == (None, None, "merged")
    helper = research["children"][0]
    assert helper["id"] == "main:research:helper" and helper["state"] == "active"


def test_ls_tree_finds_children_through_the_index_not_the_logs(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    original = children_module.children_of

    def counting(store: ags.BaseStore, parent_id: str) -> list[ChildInfo]:
        asked.append(parent_id)
        return original(store, parent_id)

    monkeypatch.setattr(children_module, "children_of", counting)
    assert invoke(family, "ls", "--tree")[0] == 0
    assert sorted(asked) == sorted(
        ["main", "main:critic", "main:research", "main:research:helper", "other"]
    )


def test_ls_tree_of_an_empty_store_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert invoke(str(tmp_path / "empty"), "ls", "--tree")[1].startswith("no sessions in")


# -- rm ---------------------------------------------------------------------------------------


def existing(url: str) -> list[str]:
    store = ags.open_store(url, create=False)
    try:
        return sorted(info.id for info in store.list())
    finally:
        store.close()


ALL = ["main", "main:critic", "main:research", "main:research:helper", "other"]


def test_rm_refuses_a_session_with_children_and_deletes_nothing(family: str) -> None:
    code, out, err = invoke(family, "rm", "-y", "main")
    assert code == 1 and out == ""
    assert err == (
        "Error: session 'main' has 2 child session(s) (3 sessions below it in all): pass "
        "-r/--recursive to delete them with it (rm -r --dry-run shows what would go); nothing "
        "deleted\n"
    )
    code, _, err = invoke(family, "rm", "-y", "other", "main:research")
    assert code == 1 and "'main:research' has 1 child session(s):" in err
    code, _, err = invoke(family, "rm", "--dry-run", "main")
    assert code == 1
    assert existing(family) == ALL


def test_rm_of_a_leaf_child_needs_no_recursive(family: str) -> None:
    code, out, _ = invoke(family, "rm", "-y", "main:research:helper")
    assert (code, out) == (0, "deleted main:research:helper\n")
    assert "main:research:helper" not in existing(family)


def test_rm_recursive_dry_run_lists_the_subtree(family: str) -> None:
    code, out, _ = invoke(family, "rm", "-r", "--dry-run", "main")
    assert code == 0
    assert out.splitlines() == [
        "would delete main (10 events)",
        "would delete main:research (7 events, child of main)",
        "would delete main:research:helper (1 events, child of main:research)",
        "would delete main:critic (2 events, child of main)",
    ]
    assert existing(family) == ALL


def test_rm_recursive_deletes_the_whole_tree(family: str) -> None:
    code, out, _ = invoke(family, "rm", "-r", "-y", "--json", "main", "main:research")
    assert code == 0
    reported = [json.loads(line) for line in out.splitlines()]
    assert [(r["session_id"], r["events"], r["deleted"]) for r in reported] == [
        ("main", 10, True),
        ("main:research", 7, True),
        ("main:research:helper", 1, True),
        ("main:critic", 2, True),
    ]
    assert existing(family) == ["other"]
    store = ags.open_store(family, create=False)
    try:
        assert store.children_of("main") == [] and store.children_of("main:research") == []
    finally:
        store.close()


def test_rm_recursive_asks_first_naming_every_session(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: True)
    code, _, err = invoke(family, "rm", "--recursive", "main:research", input="n\n")
    assert code == 1 and "nothing deleted" in err
    assert "Delete 2 session(s) for good: main:research, main:research:helper?" in err
    assert existing(family) == ALL
    code, out, _ = invoke(family, "rm", "-r", "main:research", input="y\n")
    assert code == 0
    assert out.splitlines() == [
        "deleted main:research",
        "deleted main:research:helper (child of main:research)",
    ]
    assert existing(family) == ["main", "main:critic", "other"]


def test_rm_without_a_terminal_still_needs_yes_for_a_tree(family: str) -> None:
    code, _, err = invoke(family, "rm", "-r", "main")
    assert code == 2 and "delete 4 session(s) without asking" in err
    assert existing(family) == ALL


def test_show_of_a_summary_merge_shows_the_summary_escaped(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "s")
    lead = store.get("lead")
    with lead.turn() as turn:
        turn.user("go")
    child = lead.fork("scout", child_id="lead:scout")
    child.merge("found \x1b[2Jit")
    store.close()
    out = invoke(str(tmp_path / "s"), "show", "lead")[1]
    assert body(out)[-1] == (
        "6 subagent scout merged from session lead:scout: as a summary: found \\x1b[2Jit"
    )
    out = invoke(str(tmp_path / "s"), "show", "lead:scout")[1]
    assert body(out)[-1] == "2  MERGED  into session lead: a summary, ending at its seq 6"


# -- shredding a parent with children -------------------------------------------------------

PASSPHRASE = "family-passphrase"
COPIED = "zq7InheritedCopy0x"
"""In the parent's history, so in every child's inherited copy of it."""


@pytest.fixture(params=["jsonl", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sealed_family(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An encrypted store shaped like ``family``: ``main`` with ``main:research`` (merged,
    with ``main:research:helper``, active) and ``main:critic`` (discarded), each child holding
    a copy of ``main``'s history; and ``other``. Returns its URL."""
    from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema

    schemas: list[str] = []
    if request.param == "jsonl":
        url = str(tmp_path / "s")
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 's.db'}"
    else:
        if not DSN:
            pytest.skip("set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL tests")
        schemas.append(new_schema_name())
        url = url_with_schema(schemas[0])
    try:
        with ags.open_store(url, passphrase=PASSPHRASE) as store:
            main = store.get("main")
            with main.turn(agent="lead") as turn:
                turn.user(f"plan the trip {COPIED}")
                turn.assistant("delegating")
            research = main.fork("researcher", inherit="all", child_id="main:research")
            research.fork("helper", inherit="all", child_id="main:research:helper")
            critic = main.fork("critic", inherit="all", child_id="main:critic")
            research.merge("found it")
            critic.discard("not needed")
            with store.get("other").turn(agent="x") as turn:
                turn.user("hi")
        yield url
    finally:
        drop_schemas(schemas)


def invoke_sealed(store: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        cli,
        ["--store", store, *args],
        env={"COLUMNS": "200", "AGENTSESSION_PASSPHRASE": PASSPHRASE},
    )
    return result.exit_code, result.stdout, result.stderr


CHILDREN = ["main:research", "main:research:helper", "main:critic"]


def shredded_ids(url: str) -> list[str]:
    with ags.open_store(url, create=False, passphrase=PASSPHRASE) as store:
        return sorted(info.id for info in store.list() if store.is_shredded(info.id))


def inherited_copy(url: str, session_id: str) -> str:
    """The first message of a child's history: its copy of the parent's."""
    with ags.open_store(url, create=False, passphrase=PASSPHRASE) as store:
        return store.get(session_id).messages()[0].text


def test_shred_refuses_a_parent_whose_children_hold_copies_and_shreds_nothing(
    sealed_family: str,
) -> None:
    code, out, err = invoke_sealed(sealed_family, "shred", "-y", "main")
    assert code == 1 and out == ""
    assert err == (
        "Error: session 'main' has 2 child session(s) holding copies of its history "
        "(main:research, main:critic): pass -r/--recursive to shred them too, or "
        "--keep-children to shred it alone; nothing shredded\n"
    )
    with (
        ags.open_store(sealed_family, create=False, passphrase=PASSPHRASE) as store,
        pytest.raises(ags.UsageError, match=r"'main' has 2 child session\(s\) holding"),
    ):
        store.shred("main")
    assert shredded_ids(sealed_family) == []
    assert inherited_copy(sealed_family, "main:research:helper") == f"plan the trip {COPIED}"


def test_shred_recursive_shreds_every_inherited_copy_children_first(sealed_family: str) -> None:
    code, out, _ = invoke_sealed(sealed_family, "shred", "-r", "-y", "--json", "main")
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        {"session_id": "main:critic", "shredded": True, "parent": "main"},
        {"session_id": "main:research:helper", "shredded": True, "parent": "main:research"},
        {"session_id": "main:research", "shredded": True, "parent": "main"},
        {"session_id": "main", "shredded": True},
    ]
    assert shredded_ids(sealed_family) == sorted(["main", *CHILDREN])
    for child in CHILDREN:
        with pytest.raises(SessionShredded):
            inherited_copy(sealed_family, child)
    with ags.open_store(sealed_family, create=False, passphrase=PASSPHRASE) as store:
        assert [m.text for m in store.get("other").messages()] == ["hi"]
        # The children are still found from the ids the shredded index keeps.
        kids = store.children_of("main")
        assert [(c.id, c.shredded) for c in kids] == [
            ("main:research", True),
            ("main:critic", True),
        ]
        assert [c.state for c in kids] == ["active", "active"]  # the index kept only ids


def test_shred_keep_children_warns_naming_the_children_that_keep_copies(
    sealed_family: str,
) -> None:
    code, out, err = invoke_sealed(sealed_family, "shred", "-y", "--keep-children", "main")
    assert (code, out) == (0, "shredded main\n")
    assert err == (
        "warning: the child sessions of main keep copies of its history: main:research, "
        "main:critic (shred them too, or rm them)\n"
    )
    assert shredded_ids(sealed_family) == ["main"]
    assert inherited_copy(sealed_family, "main:research") == f"plan the trip {COPIED}"
    with ags.open_store(sealed_family, create=False, passphrase=PASSPHRASE) as store:
        # States come from the children's own logs (the shredded index keeps only ids).
        listed = store.children_of("main", include_discarded=True)
        assert [(c.id, c.state, c.shredded) for c in listed] == [
            ("main:research", "merged", False),
            ("main:critic", "discarded", False),
        ]
        assert store.shred("main:research", recursive=True) == [
            "main:research:helper",
            "main:research",
        ]
    code, _, err = invoke_sealed(sealed_family, "shred", "-r", "--keep-children", "-y", "main")
    assert code == 2 and "not both" in err


@pytest.mark.parametrize("how", [["-r"], ["--keep-children"]])
def test_ls_tree_rm_and_delete_of_a_shredded_parent_work(
    sealed_family: str, how: list[str]
) -> None:
    assert invoke_sealed(sealed_family, "shred", "-y", *how, "main")[0] == 0
    code, out, _ = invoke_sealed(sealed_family, "ls", "--tree")
    assert code == 0
    states = {line.split()[0]: line.split(None, 5)[-1] for line in out.splitlines()[1:]}
    assert states["main"].endswith("shredded")
    assert states["other"].endswith("-")
    recursive = how == ["-r"]
    assert states["main:research:helper"].endswith("shredded" if recursive else "active")
    code, out, _ = invoke_sealed(sealed_family, "ls", "--tree", "--json")
    assert code == 0
    tree = {row["id"]: row for row in map(json.loads, out.splitlines())}
    assert tree["main"]["shredded"] is True
    assert [c["id"] for c in tree["main"]["children"]] == ["main:research", "main:critic"]
    # rm keeps refusing a session with children, and -r deletes the whole (shredded) tree.
    code, _, err = invoke_sealed(sealed_family, "rm", "-y", "main")
    assert code == 1 and "has 2 child session(s)" in err
    code, out, _ = invoke_sealed(sealed_family, "rm", "-r", "-y", "main")
    assert code == 0 and out.splitlines()[0] == "deleted main"
    assert existing_sealed(sealed_family) == ["other"]


def existing_sealed(url: str) -> list[str]:
    with ags.open_store(url, create=False, passphrase=PASSPHRASE) as store:
        return sorted(info.id for info in store.list())


def test_delete_recursive_of_a_shredded_parent_deletes_its_shredded_children(
    sealed_family: str,
) -> None:
    with ags.open_store(sealed_family, create=False, passphrase=PASSPHRASE) as store:
        store.shred("main", recursive=True)
        assert store.delete("main", recursive=True)
        assert sorted(info.id for info in store.list()) == ["other"]
        # Every trace of them went: keys, records, indexes.
        for sid in ["main", *CHILDREN]:
            for kind in ags.store.SESSION_META_KINDS:
                assert store._meta_get(kind, sid) is None, (kind, sid)


def test_a_parent_shredded_without_its_index_kept_still_lists_and_deletes(
    sealed_family: str,
) -> None:
    """A parent shredded by an earlier version: its children index is sealed under the
    destroyed key, so its children are unknown from it (they stay sessions of their own)."""
    with ags.open_store(sealed_family, create=False, passphrase=PASSPHRASE) as store:
        ring = store._keyring
        assert ring is not None
        ring.shred("main")  # the key alone, as shred did before it kept the children's ids
        assert store.children_of("main") == []
    code, out, _ = invoke_sealed(sealed_family, "ls", "--tree")
    assert code == 0
    tops = [line.split()[0] for line in out.splitlines()[1:] if not line.startswith(" ")]
    assert sorted(tops) == ["main", "main:critic", "main:research", "other"]
    code, out, _ = invoke_sealed(sealed_family, "rm", "-r", "-y", "main")
    assert (code, out) == (0, "deleted main\n")
    assert existing_sealed(sealed_family) == sorted([*CHILDREN, "other"])


_KILLED_SHREDDER = """
import os, signal, sys
import agentsession as ags
from agentsession.keys import KeyLifecycle
done = []
original = KeyLifecycle.shred_one
def shred_one(self, sid):
    if len(done) == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)  # killed before this session's shred
    original(self, sid)
    done.append(sid)
KeyLifecycle.shred_one = shred_one
ags.open_store(sys.argv[1], create=False, passphrase=sys.argv[3]).shred("main", recursive=True)
"""


@pytest.mark.parametrize("survivors", [1, 2, 3])
def test_a_recursive_shred_killed_midway_leaves_the_parent_and_is_finished_by_a_rerun(
    sealed_family: str, survivors: int
) -> None:
    """A process killed with SIGKILL after shredding ``survivors`` sessions of the subtree
    (children first): the parent is not shredded yet, every store-wide tool still works, and
    ``shred -r`` run again shreds the rest."""
    import subprocess
    import sys

    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_SHREDDER, sealed_family, str(survivors), PASSPHRASE],
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    done = shredded_ids(sealed_family)
    assert len(done) == survivors and "main" not in done
    assert invoke_sealed(sealed_family, "ls", "--tree")[0] == 0
    assert inherited_copy(sealed_family, "main") == f"plan the trip {COPIED}"
    code, out, _ = invoke_sealed(sealed_family, "shred", "-r", "-y", "main")
    assert code == 0 and out.splitlines()[-1] == "shredded main"
    assert shredded_ids(sealed_family) == sorted(["main", *CHILDREN])
