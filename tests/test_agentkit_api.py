"""The rest of agentkit's session API: outbound events, Todo/Finish constants, agentkit's
workspace names, stores resolved per tenant workspace, agentkit's layout of the identity
mappings (``current.json``, ``agent.json``, ``cli_current.jsonl``) and the one-file store."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import msgspec
import pytest

import agentsession as ags
from agentsession import events
from agentsession.backends.jsonl import (
    CLI_CURRENT_LINK,
    JsonlFileStore,
    JsonlLog,
    JsonlSession,
    JsonlStore,
    open_jsonl_file,
)
from agentsession.chat import (
    TENANT_TOOL_WORK_DIR,
    ActorRef,
    OutboundEvent,
    TurnEnvelope,
    WorkspaceStores,
    active_session,
    agent_binding,
    apply_envelope,
    bind_agent,
    cli_current,
    default_commands,
    outbound_from_envelope,
    session_route_from_delivery,
    set_active_session,
    set_cli_current,
    tenant_resolver,
    workspace_dir_name,
)
from agentsession.chat.routing import outbound_route_id, workspace_local_dir_name
from agentsession.codec import encode


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# ---------------------------------------------------------------------------------------------
# Constants.


def test_todo_and_finish_constants_are_agentkits() -> None:
    assert (events.TODO_PENDING, events.TODO_IN_PROGRESS, events.TODO_DONE) == (
        "pending",
        "in_progress",
        "done",
    )
    assert events.TODO_STATUSES == ("pending", "in_progress", "done")
    assert (events.FINISH_COMPLETED, events.FINISH_BLOCKED) == ("completed", "blocked")
    assert events.FINISH_STATUSES == ("completed", "blocked")
    assert events.Todo(id="1", status=events.TODO_DONE).done
    assert not events.Todo(id="1", status=events.TODO_IN_PROGRESS).done
    assert TENANT_TOOL_WORK_DIR == "work"


# ---------------------------------------------------------------------------------------------
# Outbound events.


def envelope() -> TurnEnvelope:
    return TurnEnvelope(
        route=session_route_from_delivery("slack", "slack:C001:t:17.9", reply_to="m-1"),
        conversation="slack:C001",
        workspace="slack:C001",
        agent_id="coder",
        actor=ActorRef(user_id="U1"),
    )


def test_outbound_from_envelope_takes_route_platform_and_user() -> None:
    env = envelope()
    out = outbound_from_envelope(env, "assistant/message", {"text": "hi"})
    assert isinstance(out, OutboundEvent)
    assert out.route == env.route
    assert (out.platform_id, out.user_id, out.agent_id) == ("slack", "U1", "")
    assert out.type == "assistant/message"
    assert out.payload() == {"text": "hi"}
    assert outbound_route_id(out) == "slack:C001:t:17.9"
    assert outbound_route_id(out.route) == "slack:C001:t:17.9"
    out.require_platform_id()
    wire = json.loads(encode(out))
    assert list(wire) == ["Route", "AgentID", "PlatformID", "UserID", "Type", "Data"]
    assert wire["Data"] == {"text": "hi"}
    assert msgspec.json.decode(encode(out), type=OutboundEvent) == out


def test_outbound_data_forms() -> None:
    env = envelope()
    assert outbound_from_envelope(env, "x").payload() is None
    assert bytes(outbound_from_envelope(env, "x").data) == b"null"
    assert outbound_from_envelope(env, "x", b'{"a":1}').payload() == {"a": 1}
    assert outbound_from_envelope(env, "x", msgspec.Raw(b"[1]")).payload() == [1]
    assert outbound_from_envelope(env, "x", "text").payload() == "text"
    assert outbound_from_envelope(env, "x", agent_id="coder").agent_id == "coder"
    with pytest.raises(ags.UsageError, match="not JSON"):
        outbound_from_envelope(env, "x", b"{oops")
    with pytest.raises(ags.UsageError, match="type"):
        outbound_from_envelope(env, " ")


def test_outbound_from_the_current_envelope_and_without_a_platform() -> None:
    with apply_envelope(envelope()):
        out = outbound_from_envelope(None, "session/recovery", {"steps": 1})
    assert out.platform_id == "slack" and out.user_id == "U1"
    bare = outbound_from_envelope(TurnEnvelope(), "usage")
    assert outbound_route_id(bare) == ""
    with pytest.raises(ags.UsageError, match="platformID"):
        bare.require_platform_id()


# ---------------------------------------------------------------------------------------------
# Workspace directory names.


@pytest.mark.parametrize(
    ("key", "omit", "expected"),
    [
        ("slack:C123ABC", False, "slack_C123ABC"),
        ("cli:default", False, "cli_default"),
        ("a.b", False, "a.b"),
        ("....", False, ".___"),
        ("../..", False, ".__._"),
        ("slack:C123ABC", True, "C123ABC"),
        ("chat-api:slack_D0AK", True, "slack_D0AK"),
        ("", False, ""),
        (".", False, "_"),
        ("é/x", False, "__x"),
    ],
)
def test_agentkit_workspace_names(key: str, omit: bool, expected: str) -> None:
    assert workspace_local_dir_name(key, omit, dialect="agentkit") == expected
    if not omit:
        assert workspace_dir_name(key, dialect="agentkit") == expected


def test_the_default_workspace_names_stay_injective() -> None:
    assert workspace_local_dir_name("chat-api:slack_D0AK", True) == "slack%5FD0AK"
    assert workspace_dir_name("a:b") != workspace_dir_name("a_b")
    assert workspace_dir_name("a:b", dialect="agentkit") == workspace_dir_name(
        "a_b", dialect="agentkit"
    )
    with pytest.raises(ags.UsageError, match="dialect"):
        workspace_dir_name("a", dialect="go")  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["..", "../..", "slack:../other", "a/../../b", ".", "./..", "...."])
def test_agentkit_workspace_names_never_traverse(key: str) -> None:
    name = workspace_dir_name(key, dialect="agentkit")
    assert name not in ("", ".", "..") and ".." not in name and "/" not in name


# ---------------------------------------------------------------------------------------------
# Stores resolved per tenant workspace.


def test_each_tenant_gets_its_own_store_and_work_dir(tmp_path: Path) -> None:
    pinned = tmp_path / "project-a"
    resolve = tenant_resolver(
        tmp_path / "tenants", tenants={"slack:C9": pinned}, dialect="agentkit"
    )
    with WorkspaceStores(resolve, dialect="agentkit") as stores:
        one = stores.get("cli:default", "slack:C001")
        two = stores.get("cli:default", "slack:C002")
        one.append(ags.Event.new("user/message", ags.Message.user("one")))
        assert two.read() == []  # same id, different tenants: different sessions
        assert one.location == str(tmp_path / "tenants/slack_C001/sessions/cli_default.jsonl")
        assert two.location == str(tmp_path / "tenants/slack_C002/sessions/cli_default.jsonl")
        assert (tmp_path / "tenants/slack_C001/work").is_dir()
        assert mode(tmp_path / "tenants/slack_C001/sessions") == 0o700
        assert stores.store("slack:C001") is stores.store("slack:C001")
        assert stores.directory("slack:C9") == str(pinned / "sessions")
        assert stores.store("").location == str(tmp_path / "tenants/_default/sessions")
        with apply_envelope(TurnEnvelope(workspace="slack:C002")):
            assert stores.store() is stores.store("slack:C002")
    with pytest.raises(ags.UsageError, match="closed"):
        stores.store("slack:C001")


def test_workspace_stores_use_the_default_names_and_options(tmp_path: Path) -> None:
    stores = WorkspaceStores(
        tenant_resolver(tmp_path), sessions_dir=".", work_dir=None, on_corrupt="quarantine"
    )
    store = stores.store("chat-api:a_b")
    assert store.location == str(tmp_path / "chat-api_a%5Fb")
    assert store.on_corrupt == "quarantine" and store.dialect == "agentsession"
    assert not (tmp_path / "chat-api_a%5Fb" / "work").exists()
    stores.close()


def test_workspace_stores_refuse_paths_out_of_the_tenant(tmp_path: Path) -> None:
    for bad in ("../x", "/abs", " "):
        with pytest.raises(ags.UsageError):
            WorkspaceStores(tenant_resolver(tmp_path), sessions_dir=bad)
    (tmp_path / "outside").mkdir()
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "sessions").symlink_to(tmp_path / "outside")
    stores = WorkspaceStores(lambda key: tmp_path / "t")
    with pytest.raises(ags.StorageError, match="outside the tenant root"):
        stores.store("x")
    with pytest.raises(ags.UsageError, match="no directory"):
        WorkspaceStores(lambda key: "").store("x")


# ---------------------------------------------------------------------------------------------
# agentkit's layout of the identity mappings.


@pytest.fixture
def ak(tmp_path: Path) -> JsonlStore:
    return JsonlStore(tmp_path, dialect="agentkit")


def test_active_sessions_live_in_current_json(ak: JsonlStore, tmp_path: Path) -> None:
    key = "slack:C001:t:123:u:U111"
    assert active_session(ak, key) == key
    set_active_session(ak, key, "slack:C001:new:1")
    path = tmp_path / "slack_C001_t_123_u_U111" / "current.json"
    data = json.loads(path.read_bytes())
    assert data["sessionId"] == "slack:C001:new:1"
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert active_session(JsonlStore(tmp_path, dialect="agentkit"), key) == "slack:C001:new:1"
    set_active_session(ak, key, key)  # back to itself: the file goes, and the empty directory
    assert not path.parent.exists()
    assert not (tmp_path / ".meta").exists()


def test_agent_binding_lives_in_agent_json(ak: JsonlStore, tmp_path: Path) -> None:
    session = ak.get("slack:C001")
    session.append(ags.Event.new("user/message", ags.Message.user("hi")))
    bind_agent(ak, "slack:C001", "coder")
    path = tmp_path / "slack_C001" / "agent.json"
    assert json.loads(path.read_bytes())["agentId"] == "coder"
    assert agent_binding(JsonlStore(tmp_path, dialect="agentkit"), "slack:C001") == "coder"
    assert ak.delete("slack:C001")
    assert not path.exists()
    assert agent_binding(ak, "slack:C001") == ""


def test_files_agentkit_wrote_are_read(tmp_path: Path) -> None:
    (tmp_path / "slack_C001").mkdir()
    (tmp_path / "slack_C001" / "current.json").write_text('{"sessionId":"slack:C001:new:9"}')
    (tmp_path / "slack_C001" / "agent.json").write_text('{"AgentID":"ops"}')
    (tmp_path / "slack_C002").mkdir()
    (tmp_path / "slack_C002" / "current.json").write_text('{"sessionId":""}')
    store = JsonlStore(tmp_path, dialect="agentkit")
    assert active_session(store, "slack:C001") == "slack:C001:new:9"
    assert agent_binding(store, "slack:C001") == "ops"
    assert active_session(store, "slack:C002") == "slack:C002"
    (tmp_path / "slack_C002" / "current.json").write_text("[]")
    with pytest.raises(ags.CorruptLogError):
        active_session(store, "slack:C002")


def test_two_stores_agree_on_every_pointer(tmp_path: Path) -> None:
    a = JsonlStore(tmp_path, dialect="agentkit")
    b = JsonlStore(tmp_path, dialect="agentkit")
    set_active_session(a, "slack:C001", "slack:C001:new:1")
    bind_agent(a, "slack:C001:new:1", "coder")
    set_cli_current(a, "cli:20260905-101112.123")
    assert active_session(b, "slack:C001") == "slack:C001:new:1"
    assert agent_binding(b, "slack:C001:new:1") == "coder"
    assert cli_current(b) == "cli:20260905-101112.123"
    set_cli_current(b, "cli:default")
    assert cli_current(a) == "cli:default"


def test_the_cli_pointer_is_a_relative_symlink(ak: JsonlStore, tmp_path: Path) -> None:
    link = tmp_path / CLI_CURRENT_LINK
    assert cli_current(ak) == "cli:default" and not os.path.lexists(link)
    set_cli_current(ak, "cli:default")
    assert link.is_symlink() and os.readlink(link) == "cli_default.jsonl"
    assert cli_current(ak) == "cli:default"
    set_cli_current(ak, "cli:x/y")  # agentkit names it cli_x_y: the claim keeps the exact id
    assert os.readlink(link) == "cli_x_y.jsonl"
    assert cli_current(ak) == "cli:x/y"
    assert ak.list() == []  # the link is no session, and no temporary file is left
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []
    ak.meta_set("cli", "current", None)
    assert not os.path.lexists(link)


def test_the_new_command_moves_the_cli_symlink(ak: JsonlStore, tmp_path: Path) -> None:
    fresh = default_commands(ak).dispatch("/new")
    assert fresh is not None and fresh.startswith("cli:")
    assert cli_current(ak) == fresh
    target = os.readlink(tmp_path / CLI_CURRENT_LINK)
    assert "/" not in target and target.startswith("cli_")
    session = ak.get(fresh)
    session.append(ags.Event.new("user/message", ags.Message.user("hi")))
    assert os.path.realpath(tmp_path / CLI_CURRENT_LINK) == session.location


def test_a_pointer_agentkit_wrote_maps_to_the_id_of_its_file(tmp_path: Path) -> None:
    link = tmp_path / CLI_CURRENT_LINK
    store = JsonlStore(tmp_path, dialect="agentkit")
    for target, expected in [
        ("cli_20260905-101112.123.jsonl", "cli:20260905-101112.123"),
        ("cli_a_b.jsonl", "cli:a_b"),
        ("slack_C001.jsonl", "slack_C001"),
    ]:
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        found = cli_current(store)
        assert found == expected
        assert os.path.basename(store.path_for(found)) == target


@pytest.mark.parametrize(
    "target", ["../outside/cli_x.jsonl", "/etc/passwd", "sub/cli_x.jsonl", ".hidden.jsonl", "x"]
)
def test_a_pointer_out_of_the_store_is_never_followed(tmp_path: Path, target: str) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / CLI_CURRENT_LINK).symlink_to(target)
    assert cli_current(JsonlStore(store, dialect="agentkit")) == "cli:default"


def test_a_regular_file_in_place_of_the_pointer_is_refused(tmp_path: Path) -> None:
    (tmp_path / CLI_CURRENT_LINK).write_text("{}\n")
    store = JsonlStore(tmp_path, dialect="agentkit")
    with pytest.raises(ags.StorageError, match="not a symbolic link"):
        cli_current(store)
    with pytest.raises(ags.StorageError, match="not a symbolic link"):
        set_cli_current(store, "cli:default")
    assert (tmp_path / CLI_CURRENT_LINK).read_text() == "{}\n"
    with pytest.raises(ags.UsageError, match="CLI pointer"):
        store.get("cli:current")


def test_a_symlinked_sidecar_directory_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    (store_dir / "slack_C001").symlink_to(outside)
    (outside / "current.json").write_text('{"sessionId":"evil"}')
    store = JsonlStore(store_dir, dialect="agentkit")
    with pytest.raises(ags.StorageError, match="symbolic link"):
        active_session(store, "slack:C001")
    with pytest.raises(ags.StorageError, match="symbolic link"):
        set_active_session(store, "slack:C001", "slack:C001:new:1")
    with pytest.raises(ags.StorageError, match="symbolic link"):
        bind_agent(store, "slack:C001", "coder")
    assert sorted(p.name for p in outside.iterdir()) == ["current.json"]
    assert (outside / "current.json").read_text() == '{"sessionId":"evil"}'


def test_a_symlinked_sidecar_file_is_never_followed(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text('{"agentId":"x"}')
    (tmp_path / "store" / "slack_C001").mkdir(parents=True)
    (tmp_path / "store" / "slack_C001" / "agent.json").symlink_to(tmp_path / "secret")
    store = JsonlStore(tmp_path / "store", dialect="agentkit")
    with pytest.raises(ags.StorageError, match="symbolic link"):
        agent_binding(store, "slack:C001")


def test_keys_agentkit_names_alike_are_kept_apart(ak: JsonlStore) -> None:
    set_active_session(ak, "a:b", "a:b:new:1")
    assert active_session(ak, "a_b") == "a_b"  # a:b's entry, not a_b's
    with pytest.raises(ags.UsageError, match="cannot keep them apart"):
        set_active_session(ak, "a_b", "a_b:new:1")
    assert active_session(ak, "a:b") == "a:b:new:1"


def test_keys_agentkit_cannot_name(ak: JsonlStore) -> None:
    assert active_session(ak, "slack:C1:t:1..2") == "slack:C1:t:1..2"
    with pytest.raises(ags.UsageError):
        set_active_session(ak, "slack:C1:t:1..2", "x")
    with pytest.raises(ags.UsageError, match="reserved"):
        bind_agent(ak, ".meta", "coder")
    with pytest.raises(ags.UsageError, match="reserved"):
        set_active_session(ak, ".", "x")


def test_the_default_dialect_keeps_its_meta_directory(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    set_active_session(store, "slack:C001", "slack:C001:new:1")
    set_cli_current(store, "cli:x")
    assert (tmp_path / ".meta").is_dir()
    assert not os.path.lexists(tmp_path / CLI_CURRENT_LINK)
    assert not (tmp_path / "slack_C001").exists()


# ---------------------------------------------------------------------------------------------
# The store over one file.


def test_one_file_holds_one_session(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "chat.jsonl"
    session = open_jsonl_file(path)
    assert isinstance(session, JsonlSession) and isinstance(session._log, JsonlLog)
    assert session.id == "chat" and session.location == str(path)
    session.append(ags.Event.new("user/message", ags.Message.user("one")))
    session.close()
    again = open_jsonl_file(path, session_id="chat")
    seq = again.append(ags.Event.new("user/message", ags.Message.user("two")))
    assert seq == 2 and [m.text for m in again.messages()] == ["one", "two"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["chat.jsonl"]
    assert mode(path) == 0o600


def test_the_file_store_knows_only_its_session(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    store = JsonlFileStore(path, session_id="slack:C001", dialect="agentkit")
    assert store.file_path == store.location == str(path)
    hi = ags.Event.new("user/message", ags.Message.user("hi"))
    store.session.append(hi)
    head = b'{"ID":"%s","Seq":1,"SessionID":"slack:C001"' % hi.id.encode()
    assert path.read_bytes().startswith(head)
    assert store.get("") is store.session
    assert [info.id for info in store.list()] == ["slack:C001"]
    with pytest.raises(ags.SessionNotFound):
        store.get("slack:C002")
    assert not store.exists("slack:C002") and not store.delete("slack:C002")
    with store.lock("slack:C001", timeout=1):
        pass
    assert store.delete("slack:C001") and not path.exists()


def test_the_file_store_refuses_links_and_directories(tmp_path: Path) -> None:
    (tmp_path / "real.jsonl").write_text("")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "real.jsonl")
    with pytest.raises(ags.StorageError, match="not a regular file"):
        JsonlFileStore(tmp_path / "link.jsonl")
    with pytest.raises(ags.UsageError, match="not a file path"):
        JsonlFileStore(tmp_path)
    with pytest.raises(ags.UsageError, match="session id"):
        JsonlFileStore(tmp_path / ".jsonl")


# ---------------------------------------------------------------------------------------------
# docs/interop.md agrees with the mapping tables and names every agentkit API name.

DOC = Path(__file__).parent.parent / "docs" / "interop.md"


def test_the_interop_page_shows_the_mapping_tables() -> None:
    from agentsession.interop import agentkit as ak

    text = DOC.read_text(encoding="utf-8")
    constants = {
        value: n
        for n in events.__all__
        if n.isupper() and isinstance(value := getattr(events, n), str)
    }
    for go, kind, ours in ak.EVENT_TYPE_TABLE:
        assert f"| `{go}` | `{kind}` | `{constants[ours]}` |" in text
    for key, field in ak.EVENT_KEYS.items():
        assert f"| `{key}` | `{field}` |" in text if field else f"| `{key}` | not kept" in text
    for table in (ak.MESSAGE_KEYS, ak.TOOL_CALL_KEYS, ak.TOOL_RESULT_KEYS):
        for key, value in table.items():
            assert f"| `{key}` | `{value}` |" in text
    for kind, ours in ak.PART_TYPES.items():
        shown = kind or '""'
        assert f"| `{shown}` | `{ours}` |" in text
    for obj, keys in ak.EXTENSION_KEYS.items():
        assert f"| `{obj}` | " + ", ".join(f"`{k}`" for k in keys) + " |" in text
    assert ", ".join(f"`{k}`" for k in ak.PART_KEYS) in text


def test_the_interop_page_lists_every_agentkit_name_once() -> None:
    import re

    text = DOC.read_text(encoding="utf-8").split("## Every agentkit name", 1)[1]
    rows = re.findall(r"^\| `([A-Z]\w*)` \| ([^|]+) \| (.+) \|$", text, re.M)
    names = [name for name, _, _ in rows]
    assert len(names) == len(set(names))
    seeds = Path(__file__).parent.parent.parent / "shared" / "seeds"
    for seed in seeds.glob("000_*.txt"):
        api = seed.read_text(encoding="utf-8")
        declared = set(re.findall(r"^(?:func|type|const) ([A-Z]\w*)", api, re.M))
        declared |= set(re.findall(r"^\t([A-Z]\w*) +(?:\w+ )?= ", api, re.M))
        assert declared - set(names) == set()
    none = sum(1 for _, _, eq in rows if eq.startswith("none: "))
    have = len(rows) - none
    assert f"**Totals: {len(rows)} names; {have} have an equivalent, {none} do not.**" in text
