"""Delivery ids, scopes, workspace keys, fresh ids and route refs (agentsession.routing)."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import re
from collections.abc import Callable

import msgspec
import pytest

from agentsession._names import unsafe_name
from agentsession.chat import routing
from agentsession.chat.routing import (
    DEFAULT_CLI_SESSION_ID,
    DEFAULT_SESSION_SCOPE,
    ROUTE_KIND_SESSION,
    Delivery,
    RouteRef,
    SessionRouteTarget,
    apply_scope,
    build_delivery_id,
    build_session_route,
    channel_key_matches,
    child_conversation_id,
    decode_route_ref,
    decode_session_route,
    delivery_with_user,
    encode_route_ref,
    new_cli_session_id,
    new_session_id,
    outbound_route_id,
    parse_delivery,
    parse_scope,
    route_reply_to,
    route_session_id,
    route_target_from_route,
    session_route_from_delivery,
    slack_session_id,
    slack_session_id_for_scope,
    workspace_dir_name,
    workspace_key,
    workspace_local_dir_name,
)
from agentsession.errors import UsageError


def delivery_route(platform: str, delivery_id: str) -> RouteRef:
    """A session route whose target names only a delivery id (agentkit's ``SessionRoute``)."""
    return build_session_route(platform, SessionRouteTarget(delivery_id=delivery_id))


# ---------------------------------------------------------------------------------------------
# Scopes and delivery ids.


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ("channel", "slack:C001"),
        ("thread", "slack:C001:t:123.456"),
        ("user", "slack:C001:u:U777"),
    ],
)
def test_apply_scope_gives_the_channel_thread_or_user_key(scope: str, expected: str) -> None:
    delivery = build_delivery_id("slack", "C001", "123.456", "U777")
    assert apply_scope(delivery, scope, "U777") == expected


def test_apply_scope_reads_the_legacy_platform_channel_user_form() -> None:
    assert apply_scope("slack:C001:U777", "user") == "slack:C001:u:U777"


def test_legacy_user_segment_can_be_turned_off() -> None:
    assert parse_delivery("slack:C001:U777").user == "U777"
    assert parse_delivery("slack:C001:U777", legacy_user_segment=False).user == ""


@pytest.mark.parametrize("scope", ["channel", "thread", "user"])
def test_apply_scope_passes_cli_ids_through_unchanged(scope: str) -> None:
    assert apply_scope("cli:default", scope) == "cli:default"


def test_apply_scope_passes_schedule_side_sessions_through_unchanged() -> None:
    assert apply_scope("schedule:agent-1:123456789", "channel") == "schedule:agent-1:123456789"


@pytest.mark.parametrize("blank", ["", "   "])
def test_apply_scope_returns_a_blank_id_unchanged(blank: str) -> None:
    assert apply_scope(blank, "thread", "U1") == blank


def test_apply_scope_uses_the_user_id_when_the_delivery_has_no_user() -> None:
    assert apply_scope("slack:C001:t:1.0", "user", "U9") == "slack:C001:u:U9"
    assert apply_scope("slack:C001:t:1.0:u:U1", "user", "U9") == "slack:C001:u:U1"


@pytest.mark.parametrize("raw", ["", "channel", "CHANNEL", "bogus", "  "])
def test_parse_scope_defaults_to_channel(raw: str) -> None:
    assert parse_scope(raw) == "channel"
    assert DEFAULT_SESSION_SCOPE == "channel"


@pytest.mark.parametrize(("raw", "expected"), [("thread", "thread"), (" User ", "user")])
def test_parse_scope_reads_thread_and_user(raw: str, expected: str) -> None:
    assert parse_scope(raw) == expected


def test_build_delivery_id_joins_platform_channel_thread_and_user() -> None:
    assert build_delivery_id("slack", "C001", "123.456", "U777") == "slack:C001:t:123.456:u:U777"


def test_build_delivery_id_strips_parts_and_leaves_out_empty_ones() -> None:
    assert build_delivery_id(" slack ", " C001 ", "  ", " U7 ") == "slack:C001:u:U7"
    assert build_delivery_id("slack", "C001") == "slack:C001"


@pytest.mark.parametrize(("platform", "channel"), [("", "C001"), ("slack", " "), ("", "")])
def test_build_delivery_id_is_empty_without_platform_or_channel(
    platform: str, channel: str
) -> None:
    assert build_delivery_id(platform, channel, "1.0", "U1") == ""


def test_build_delivery_id_rejects_a_colon_inside_a_part() -> None:
    with pytest.raises(UsageError, match="user"):
        build_delivery_id("matrix", "room", user="@alice:matrix.org")


def test_parse_delivery_reads_every_part() -> None:
    assert parse_delivery("slack:C001:t:123.456:u:U777") == Delivery(
        platform="slack", channel="C001", thread="123.456", user="U777", routable=True
    )


@pytest.mark.parametrize("id_", ["", "bare-id", "   "])
def test_parse_delivery_of_fewer_than_two_segments_is_empty(id_: str) -> None:
    assert parse_delivery(id_, "U1") == Delivery()


@pytest.mark.parametrize("platform", ["cli", "sub", "jsonl", "worker", "timer", "cron"])
def test_two_segment_ids_of_opaque_transports_are_not_routable(platform: str) -> None:
    assert parse_delivery(f"{platform}:default", "U1") == Delivery(
        platform=platform, channel="default", routable=False
    )


def test_an_opaque_transport_with_a_thread_is_routable() -> None:
    parts = parse_delivery("cli:main:t:7")
    assert parts.routable
    assert parts.thread == "7"


def test_schedule_ids_are_never_routable_but_keep_platform_and_channel() -> None:
    assert parse_delivery("schedule:agent-1:t:5:u:U1") == Delivery(
        platform="schedule", channel="agent-1", routable=False
    )


def test_parse_delivery_skips_unknown_segments_and_dangling_markers() -> None:
    assert parse_delivery("slack:C001:x:y:t:1.0:u") == Delivery(
        platform="slack", channel="C001", thread="1.0", routable=True
    )


def test_parse_delivery_reads_thread_and_user_values_spelled_t_and_u_by_position() -> None:
    parts = parse_delivery("slack:t:t:u:u:t")
    assert (parts.channel, parts.thread, parts.user) == ("t", "u", "t")


def test_parse_delivery_uses_the_fallback_user_only_when_the_id_has_none() -> None:
    assert parse_delivery("slack:C001", " U9 ").user == "U9"
    assert parse_delivery("slack:C001:u:U1", "U9").user == "U1"


def test_parse_delivery_strips_each_segment() -> None:
    assert parse_delivery(" slack : C001 :t: 1.0 ") == Delivery(
        platform="slack", channel="C001", thread="1.0", routable=True
    )


def test_apply_scope_of_a_padded_channel_is_stable() -> None:
    # agentkit gives "slack:C1 " here, and "slack:C1" when applied again.
    once = apply_scope("slack:C1 :t:x", "channel")
    assert once == "slack:C1"
    assert apply_scope(once, "channel") == once


def test_delivery_with_user_replaces_the_user() -> None:
    delivery = build_delivery_id("slack", "C001", "123.456", "U111")
    expected = build_delivery_id("slack", "C001", "123.456", "U222")
    assert delivery_with_user(delivery, "U222") == expected


def test_delivery_with_user_adds_a_user_and_drops_unknown_segments() -> None:
    assert delivery_with_user("slack:C001:x:y:t:1.0", "U5") == "slack:C001:t:1.0:u:U5"


@pytest.mark.parametrize(("delivery", "user"), [("slack:C001", "  "), ("cli:default", "U1")])
def test_delivery_with_user_leaves_blank_users_and_opaque_ids_alone(
    delivery: str, user: str
) -> None:
    assert delivery_with_user(delivery, user) == delivery


def test_channel_key_matches_ignores_surrounding_whitespace() -> None:
    assert channel_key_matches(" slack:C001", "slack:C001 ")
    assert not channel_key_matches("slack:C001", "slack:C002")


# ---------------------------------------------------------------------------------------------
# Slack ids and child conversations.


def test_slack_session_id_is_the_channel_or_the_channel_and_thread() -> None:
    assert slack_session_id("C001") == "slack:C001"
    assert slack_session_id("C001", "123.456") == "slack:C001:t:123.456"


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ("channel", "slack:C001"),
        ("thread", "slack:C001:t:123.456"),
        ("user", "slack:C001:u:U777"),
        ("bogus", "slack:C001"),
    ],
)
def test_slack_session_id_for_scope(scope: str, expected: str) -> None:
    assert slack_session_id_for_scope(scope, "C001", "123.456", "U777") == expected


@pytest.mark.parametrize("scope", ["channel", "thread", "user"])
def test_every_slack_scope_shares_one_workspace(scope: str) -> None:
    session_id = slack_session_id_for_scope(scope, "C001", "123.456", "U777")
    assert workspace_key(session_id) == "slack:C001"


def test_user_scope_without_a_user_falls_back_to_the_channel() -> None:
    assert slack_session_id_for_scope("user", "C001", "", "") == "slack:C001"


def test_slack_session_id_for_scope_is_empty_without_a_channel() -> None:
    assert slack_session_id_for_scope("thread", " ", "1.0", "U1") == ""


def test_child_conversation_id_names_parent_agent_and_seq() -> None:
    assert child_conversation_id("slack:C001", "researcher", 3) == "slack:C001:sub:researcher:3"


# ---------------------------------------------------------------------------------------------
# Fresh ids.

STAMPED_CLI_ID = re.compile(r"^cli:\d{8}-\d{6}\.\d{3}-[a-z2-7]{16}$")


@pytest.fixture
def set_clock(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Replace the id clock with the given times (the last one repeats), on fresh id state."""

    def install(*times: dt.datetime) -> None:
        remaining = list(times)

        def clock() -> dt.datetime:
            return remaining.pop(0) if len(remaining) > 1 else remaining[0]

        monkeypatch.setattr(routing, "_utcnow", clock)

    return install


NOON = dt.datetime(2026, 9, 5, 10, 11, 12, 123456, tzinfo=dt.timezone.utc)


def test_new_cli_session_id_is_the_utc_millisecond_and_a_random_suffix(
    set_clock: Callable[..., None],
) -> None:
    set_clock(NOON)
    made = new_cli_session_id()
    assert STAMPED_CLI_ID.match(made), made
    assert made.startswith("cli:20260905-101112.123-")


def test_new_cli_session_id_uses_the_real_clock() -> None:
    made = new_cli_session_id()
    assert STAMPED_CLI_ID.match(made), made
    today = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d")
    yesterday = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).strftime("%Y%m%d")
    assert made[4:12] in (today, yesterday)


def test_new_session_id_appends_new_and_a_stamp_to_the_base(
    set_clock: Callable[..., None],
) -> None:
    set_clock(NOON)
    made = new_session_id("slack:C001")
    assert re.fullmatch(r"slack:C001:new:20260905-101112\.123-[a-z2-7]{16}", made), made


@pytest.mark.parametrize("base", ["", "cli:default", "cli:20260101-000000.000-aaaaaa"])
def test_new_session_id_of_an_empty_or_cli_base_is_a_cli_id(base: str) -> None:
    assert STAMPED_CLI_ID.match(new_session_id(base))


def test_new_session_id_derives_from_the_current_conversation() -> None:
    assert new_session_id("feishu:oc_x").startswith("feishu:oc_x:new:")


def test_ten_thousand_ids_made_in_a_tight_loop_are_unique() -> None:
    made = [new_cli_session_id() for _ in range(10_000)]
    assert len(set(made)) == len(made)


def test_ids_made_in_the_same_millisecond_are_unique(set_clock: Callable[..., None]) -> None:
    set_clock(NOON)
    made = [new_session_id("slack:C001") for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert {m.rsplit("-", 1)[0] for m in made} == {"slack:C001:new:20260905-101112.123"}


def _make_ids(queue: multiprocessing.Queue[list[str]], count: int) -> None:
    queue.put([new_cli_session_id() for _ in range(count)])


def test_ids_made_by_processes_in_the_same_millisecond_differ(
    set_clock: Callable[..., None],
) -> None:
    set_clock(NOON)
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[list[str]] = context.Queue()
    workers = [context.Process(target=_make_ids, args=(queue, 50)) for _ in range(4)]
    for worker in workers:
        worker.start()
    made = [made_id for _ in workers for made_id in queue.get(timeout=30)]
    for worker in workers:
        worker.join(timeout=30)
    assert len(made) == 200
    assert len({m.rsplit("-", 1)[0] for m in made}) == 1  # one millisecond
    assert len(set(made)) == 200


def test_ids_sort_in_the_order_they_were_made(set_clock: Callable[..., None]) -> None:
    set_clock(*(NOON + dt.timedelta(milliseconds=ms) for ms in range(50)))
    made = [new_cli_session_id() for _ in range(50)]
    assert sorted(made) == made


def test_default_cli_session_id() -> None:
    assert DEFAULT_CLI_SESSION_ID == "cli:default"


# ---------------------------------------------------------------------------------------------
# Workspace keys and directory names.


@pytest.mark.parametrize(
    ("session_id", "expected"),
    [
        ("slack:C123ABC", "slack:C123ABC"),
        ("slack:C123ABC:U456", "slack:C123ABC"),
        ("slack:C123ABC:t:1712345678.99", "slack:C123ABC"),
        ("slack:C123ABC:u:U456", "slack:C123ABC"),
        ("feishu:oc_xxx:t:om_yyy", "feishu:oc_xxx"),
        ("cli:default", "cli:default"),
        ("  slack:C1  ", "slack:C1"),
        ("", ""),
        ("bare-id", "bare-id"),
        ("slack:", "slack"),
        (":leading", ":leading"),
    ],
)
def test_workspace_key(session_id: str, expected: str) -> None:
    assert workspace_key(session_id) == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [("slack:C123ABC", "slack_C123ABC"), ("cli:default", "cli_default"), ("a.b", "a.b"), ("", "")],
)
def test_workspace_dir_name_keeps_common_keys_readable(key: str, expected: str) -> None:
    assert workspace_dir_name(key) == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("slack:C123ABC", "C123ABC"),
        ("cli:default", "default"),
        # agentkit gives "slack_D0AK"; "_" is escaped here so names stay distinct.
        ("chat-api:slack_D0AK", "slack%5FD0AK"),
        ("bare", "bare"),
        ("slack:", ""),
    ],
)
def test_workspace_local_dir_name_can_omit_the_platform(key: str, expected: str) -> None:
    assert workspace_local_dir_name(key, omit_platform=True) == expected
    assert workspace_local_dir_name(key, omit_platform=False) == workspace_dir_name(key)


@pytest.mark.parametrize(
    "key", ["..", "../..", "slack:../other", "a/../../b", ".", "./..", "....", "a\\b", "x\x00y"]
)
def test_workspace_dir_name_never_traverses(key: str) -> None:
    name = workspace_dir_name(key)
    assert name not in ("", ".", "..")
    assert ".." not in name
    assert not set(name) & {"/", "\\", "\x00"}


def test_workspace_dir_names_of_a_colon_and_an_underscore_differ() -> None:
    # agentkit maps both to "a_b"; one would read the other's files.
    assert workspace_dir_name("a:b") != workspace_dir_name("a_b")
    assert workspace_local_dir_name("x:a_b", True) != workspace_local_dir_name("x:a%5Fb", True)


def test_workspace_dir_name_can_be_read_back() -> None:
    for key in ["slack:C123ABC", "a_b", "a/b", "...", "ünï:cødé"]:
        assert unsafe_name(workspace_dir_name(key)) == key


# ---------------------------------------------------------------------------------------------
# Route refs.


def test_route_session_id_uses_the_delivery_id_field() -> None:
    assert route_session_id(delivery_route("slack", "slack:C001:t:1:u:U1")) == "slack:C001:t:1:u:U1"


def test_route_session_id_builds_the_id_from_parts() -> None:
    route = build_session_route(
        "slack", SessionRouteTarget(channel_id="C001", thread_id="1.0", scope_user_id="U1")
    )
    assert route_session_id(route) == "slack:C001:t:1.0:u:U1"
    assert decode_session_route(route).delivery_id == "slack:C001:t:1.0:u:U1"


def test_route_session_id_builds_from_parts_when_the_target_has_no_delivery_id() -> None:
    route = RouteRef(
        platform="slack",
        kind="session",
        target=msgspec.Raw(b'{"channelId":"C001","threadId":"1.0","scopeUserId":"U1"}'),
    )
    assert route_session_id(route) == "slack:C001:t:1.0:u:U1"


def test_route_session_id_decodes_a_string_target() -> None:
    route = RouteRef(platform="slack", kind="session", target=msgspec.Raw(b'" slack:C001:t:1 "'))
    assert route_session_id(route) == "slack:C001:t:1"


def test_route_session_id_accepts_legacy_string_data() -> None:
    route = decode_route_ref(b'{"platform":"slack","kind":"session","data":"slack:C001"}')
    assert route_session_id(route) == "slack:C001"


def test_route_session_id_accepts_legacy_object_data() -> None:
    route = decode_route_ref(b'{"platform":"slack","kind":"session","data":{"id":"slack:C001"}}')
    assert route_session_id(route) == "slack:C001"


def test_route_session_id_accepts_the_legacy_session_field() -> None:
    route = decode_route_ref(
        b'{"platform":"slack","kind":"session","session":{"deliveryId":"slack:C001:t:1:u:U1"}}'
    )
    assert route_session_id(route) == "slack:C001:t:1:u:U1"


def test_target_wins_over_legacy_fields() -> None:
    route = decode_route_ref(
        {
            "kind": "session",
            "target": {"deliveryId": "slack:A"},
            "data": "slack:B",
            "sessionId": "C",
        }
    )
    assert route_session_id(route) == "slack:A"


def test_route_session_id_raises_when_there_is_no_delivery_to_name() -> None:
    no_platform = RouteRef(kind="session", target=msgspec.Raw(b'{"channelId":"C001"}'))
    with pytest.raises(UsageError, match="platform and channel"):
        route_session_id(no_platform)
    with pytest.raises(UsageError, match="no target"):
        route_session_id(RouteRef())


def test_session_route_from_delivery_fills_in_the_parts() -> None:
    delivery = build_delivery_id("slack", "C001", "1.0", "U1")
    route = session_route_from_delivery("slack", delivery, "msg-1")
    assert route_session_id(route) == delivery
    assert route_target_from_route(route) == SessionRouteTarget(
        delivery_id=delivery,
        channel_id="C001",
        thread_id="1.0",
        scope_user_id="U1",
        reply_to="msg-1",
    )


def test_session_route_from_an_opaque_delivery_names_only_the_id_and_reply() -> None:
    route = session_route_from_delivery(" cli ", " cli:default ", " m1 ")
    assert route.platform == "cli"
    assert decode_session_route(route) == SessionRouteTarget(
        delivery_id="cli:default", reply_to="m1"
    )


def test_session_route_from_a_blank_delivery_is_the_zero_route() -> None:
    assert session_route_from_delivery("slack", "  ").is_zero()


def test_route_target_from_route_fills_parts_from_the_delivery_id() -> None:
    target = route_target_from_route(delivery_route("slack", "slack:C001:t:1.0:u:U1"))
    assert (target.channel_id, target.thread_id, target.scope_user_id) == ("C001", "1.0", "U1")


def test_session_route_json_round_trips_in_the_current_form() -> None:
    route = build_session_route(
        "slack",
        SessionRouteTarget(
            channel_id="C001", thread_id="1.0", reply_to="msg-1", scope_user_id="U1"
        ),
    )
    raw = encode_route_ref(route)
    assert b'"session":' not in raw
    assert b'"target":' in raw
    decoded = decode_route_ref(raw)
    assert decoded == route
    target = route_target_from_route(decoded)
    assert (target.reply_to, target.channel_id) == ("msg-1", "C001")


def test_route_target_json_keys_are_camel_case() -> None:
    route = build_session_route(
        "slack",
        SessionRouteTarget(channel_id="C", thread_id="T", scope_user_id="U", reply_to="R"),
    )
    assert msgspec.json.decode(encode_route_ref(route)) == {
        "platform": "slack",
        "kind": "session",
        "target": {
            "deliveryId": "slack:C:t:T:u:U",
            "channelId": "C",
            "threadId": "T",
            "scopeUserId": "U",
            "replyTo": "R",
        },
    }


def test_route_ref_reads_legacy_flat_fields() -> None:
    route = decode_route_ref(
        b"""{"platform":"slack","kind":"session","sessionId":" slack:C001 ","channelId":"C001",
        "threadId":"1.0","messageId":"msg-1","userId":"U1"}"""
    )
    target = route_target_from_route(route)
    assert (target.delivery_id, target.reply_to, target.scope_user_id) == (
        "slack:C001",
        "msg-1",
        "U1",
    )
    written = msgspec.json.decode(encode_route_ref(route))
    assert set(written) == {"platform", "kind", "target"}


def test_legacy_flat_fields_without_delivery_or_channel_give_no_target() -> None:
    route = decode_route_ref({"platform": "slack", "kind": "session", "threadId": "1.0"})
    assert not route.has_target()


def test_a_null_target_counts_as_no_target() -> None:
    assert not decode_route_ref(b'{"kind":"session","target":null}').has_target()
    assert encode_route_ref(RouteRef(platform="x", target=msgspec.Raw(b""))) == b'{"platform":"x"}'


def test_decode_route_ref_rejects_what_is_not_a_route() -> None:
    for bad in (b"{", b"[1]", b'{"platform": 5}'):
        with pytest.raises(UsageError, match="not a route ref"):
            decode_route_ref(bad)


def test_route_ref_has_target() -> None:
    assert not RouteRef().has_target()
    assert delivery_route("slack", "slack:C001").has_target()
    assert build_session_route("slack", SessionRouteTarget(channel_id="C001")).has_target()


def test_equal_route_refs_hash_alike() -> None:
    decoded = decode_route_ref(encode_route_ref(delivery_route("slack", "slack:C1")))
    assert {delivery_route("slack", "slack:C1"), decoded, RouteRef()} == {decoded, RouteRef()}


def test_route_ref_is_zero() -> None:
    assert RouteRef().is_zero()
    assert RouteRef(platform=" ", kind=" ").is_zero()
    assert not delivery_route("slack", "slack:C001").is_zero()


def test_decode_session_route_returns_the_target() -> None:
    route = build_session_route("slack", SessionRouteTarget(channel_id="C001"))
    target = decode_session_route(route)
    assert target.has_target()
    assert route.kind == ROUTE_KIND_SESSION


def test_decode_session_route_rejects_other_kinds_and_empty_targets() -> None:
    with pytest.raises(UsageError, match="webhook"):
        decode_session_route(RouteRef(kind="webhook", target=msgspec.Raw(b'"x"')))
    for target in (b"{}", b'""', b'{"id":"  "}', b"42"):
        with pytest.raises(UsageError, match="names no delivery"):
            decode_session_route(RouteRef(kind="session", target=msgspec.Raw(target)))


def test_a_route_without_a_kind_is_read_as_a_session_route() -> None:
    assert (
        route_session_id(RouteRef(target=msgspec.Raw(b'{"deliveryId":"slack:C1"}'))) == "slack:C1"
    )


def test_route_reply_to_is_the_stripped_reply_or_empty() -> None:
    assert route_reply_to(session_route_from_delivery("slack", "slack:C1", " m1 ")) == "m1"
    assert route_reply_to(RouteRef()) == ""


def test_outbound_route_id_prefers_the_route() -> None:
    assert outbound_route_id(delivery_route("slack", "slack:C001:t:1")) == "slack:C001:t:1"
    assert outbound_route_id(RouteRef()) == ""
