"""Delivery ids, scopes, workspace keys, fresh ids and route refs: pure functions, no I/O.

A **delivery id** names where a message came from and where replies go::

    delivery := platform ":" channel [ ":t:" thread ] [ ":u:" user ]
    slack:C001    slack:C001:t:1712345678.9    slack:C001:t:1712345678.9:u:U456

Two-segment ids of the transports ``cli``, ``sub``, ``jsonl``, ``worker``, ``timer`` and ``cron``
(``cli:default``) and every ``schedule:`` id are *opaque*: they are session keys, not routes.

A **scope** (``channel``, ``thread`` or ``user``) collapses a delivery id into the conversation
key: with channel scope everyone in ``slack:C001`` shares one history, with thread scope each
thread has its own. The **workspace key** (``platform:channel``) is the same for every scope of
a channel, and :func:`workspace_dir_name` turns it into one safe directory name.

A **route ref** (:class:`RouteRef`) is the JSON-portable form of a return address: a platform,
a kind (only ``session`` today) and a kind-specific target (:class:`SessionRouteTarget`).

This module follows agentkit's ``session`` package (v0.2.1) and departs from it on purpose in a
few places, each stated where it happens:

* segment values are stripped of surrounding whitespace when parsed, as they are when built,
  so :func:`apply_scope` is idempotent (agentkit maps ``slack:C1 :t:x`` to ``slack:C1 `` and
  that to ``slack:C1``);
* :func:`build_delivery_id` refuses parts containing ``:`` (they would parse back differently);
* fresh ids carry a random suffix, so two made in the same millisecond never collide;
* :func:`workspace_dir_name` is injective (agentkit maps ``a:b`` and ``a_b`` to one directory);
* a ``null`` route target counts as no target.
"""

from __future__ import annotations

import base64
import datetime as _dt
import secrets
from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec

from .._names import safe_name
from ..codec import decode, encode
from ..errors import UsageError

__all__ = [
    "DEFAULT_CLI_SESSION_ID",
    "DEFAULT_SESSION_SCOPE",
    "OPAQUE_PLATFORMS",
    "ROUTE_KIND_SESSION",
    "SCHEDULE_PLATFORM",
    "SCOPES",
    "Delivery",
    "NameDialect",
    "OutboundEvent",
    "RouteRef",
    "Scope",
    "SessionRouteTarget",
    "apply_scope",
    "build_delivery_id",
    "build_session_route",
    "channel_key_matches",
    "child_conversation_id",
    "decode_route_ref",
    "decode_session_route",
    "delivery_with_user",
    "encode_route_ref",
    "new_cli_session_id",
    "new_session_id",
    "outbound_route_id",
    "parse_delivery",
    "parse_scope",
    "route_reply_to",
    "route_session_id",
    "route_target_from_route",
    "session_route_from_delivery",
    "slack_session_id",
    "slack_session_id_for_scope",
    "workspace_dir_name",
    "workspace_key",
    "workspace_local_dir_name",
]

# ---------------------------------------------------------------------------------------------
# Scopes.

Scope = Literal["channel", "thread", "user"]
"""How finely a channel's traffic is split into conversations."""

SCOPES: Final[tuple[Scope, ...]] = ("channel", "thread", "user")
"""Every scope, coarsest first."""

DEFAULT_SESSION_SCOPE: Final[Scope] = "channel"
"""The scope used when none is configured (and for any value :func:`parse_scope` does not know)."""


def parse_scope(raw: str) -> Scope:
    """The scope named by ``raw`` (case and surrounding space ignored); ``channel`` for ``""``
    and for anything unknown."""
    value = raw.strip().lower()
    if value == "thread":
        return "thread"
    if value == "user":
        return "user"
    return DEFAULT_SESSION_SCOPE


# ---------------------------------------------------------------------------------------------
# Delivery ids.

OPAQUE_PLATFORMS: Final = frozenset({"cli", "sub", "jsonl", "worker", "timer", "cron"})
"""Transports whose two-segment ids (``cli:default``) are session keys, not routes."""

SCHEDULE_PLATFORM: Final = "schedule"
"""Ids on this platform (scheduled side sessions) are never routable, however many segments."""

_THREAD_MARK: Final = "t"
_USER_MARK: Final = "u"


class Delivery(msgspec.Struct, frozen=True):
    """The parts of a delivery id, as :func:`parse_delivery` found them."""

    platform: str = ""
    """First segment (``slack``); empty when the id has fewer than two segments."""
    channel: str = ""
    """Second segment (``C001``)."""
    thread: str = ""
    """The value after ``:t:``, or empty."""
    user: str = ""
    """The value after ``:u:`` (or the legacy third segment, or the fallback user), or empty."""
    routable: bool = False
    """True for an IM-style route; False for opaque ids (``cli:default``, ``schedule:…``)."""


def build_delivery_id(platform: str, channel: str, thread: str = "", user: str = "") -> str:
    """The canonical delivery id ``platform:channel[:t:thread][:u:user]``.

    Every part is stripped; an empty thread or user is left out, and an empty platform or
    channel gives ``""``. Raises :class:`UsageError` when a part contains ``:``, since the id
    would then parse back into different parts (agentkit joins them silently).
    """
    parts = {"platform": platform, "channel": channel, "thread": thread, "user": user}
    stripped = {name: value.strip() for name, value in parts.items()}
    for name, value in stripped.items():
        if ":" in value:
            raise UsageError(f"delivery id {name} must not contain ':': {value!r}")
    if not stripped["platform"] or not stripped["channel"]:
        return ""
    out = f"{stripped['platform']}:{stripped['channel']}"
    if stripped["thread"]:
        out += f":{_THREAD_MARK}:{stripped['thread']}"
    if stripped["user"]:
        out += f":{_USER_MARK}:{stripped['user']}"
    return out


def parse_delivery(
    id: str, fallback_user: str = "", *, legacy_user_segment: bool = True
) -> Delivery:
    """Split a delivery id into its parts.

    * Fewer than two segments: not routable, every part empty.
    * ``schedule:…``, and two-segment ids of :data:`OPAQUE_PLATFORMS`: not routable; platform
      and channel are filled, nothing else.
    * Otherwise routable. From the third segment on, ``t`` followed by a value gives the
      thread and ``u`` followed by a value the user (a later one wins); other segments are
      skipped. With ``legacy_user_segment`` (the default), the old three-segment form
      ``platform:channel:user`` gives the user, as agentkit v0.2.1 did.
    * A missing user becomes ``fallback_user`` (stripped).

    Each segment is stripped of surrounding whitespace (agentkit keeps it; see the module
    docstring). A value containing ``:`` cannot be represented: the id is split first.
    """
    segments = [segment.strip() for segment in id.split(":")]
    if len(segments) < 2:
        return Delivery()
    platform, channel = segments[0], segments[1]
    if platform == SCHEDULE_PLATFORM or (platform in OPAQUE_PLATFORMS and len(segments) == 2):
        return Delivery(platform=platform, channel=channel, routable=False)
    thread = user = ""
    i = 2
    while i < len(segments):
        segment = segments[i]
        if segment in (_THREAD_MARK, _USER_MARK) and i + 1 < len(segments):
            if segment == _THREAD_MARK:
                thread = segments[i + 1]
            else:
                user = segments[i + 1]
            i += 2
            continue
        if legacy_user_segment and len(segments) == 3 and segment not in (_THREAD_MARK, _USER_MARK):
            user = segment
        i += 1
    return Delivery(
        platform=platform,
        channel=channel,
        thread=thread,
        user=user or fallback_user.strip(),
        routable=True,
    )


def apply_scope(delivery: str, scope: str, user_id: str = "") -> str:
    """The conversation key of ``delivery`` under ``scope``.

    ``channel`` gives ``platform:channel``; ``thread`` adds ``:t:thread`` and ``user`` adds
    ``:u:user`` when there is one (``user_id`` stands in for a missing user). A blank or
    non-routable id (``cli:default``) comes back unchanged. Idempotent: applying the same scope
    to the result gives the result again (for a ``user_id`` without ``:``).
    """
    trimmed = delivery.strip()
    if not trimmed:
        return delivery
    parts = parse_delivery(trimmed, user_id)
    if not parts.routable:
        return delivery
    base = f"{parts.platform}:{parts.channel}"
    chosen = parse_scope(scope)
    if chosen == "thread" and parts.thread:
        return f"{base}:{_THREAD_MARK}:{parts.thread}"
    if chosen == "user" and parts.user:
        return f"{base}:{_USER_MARK}:{parts.user}"
    return base


def delivery_with_user(delivery: str, user_id: str) -> str:
    """``delivery`` with its user set to ``user_id`` (replacing any user it had).

    A blank ``user_id`` or a non-routable id returns ``delivery`` unchanged. The id is rebuilt
    with :func:`build_delivery_id`, so segments it does not know are dropped.
    """
    user = user_id.strip()
    if not user:
        return delivery
    parts = parse_delivery(delivery)
    if not parts.routable:
        return delivery
    return build_delivery_id(parts.platform, parts.channel, parts.thread, user)


def channel_key_matches(a: str, b: str) -> bool:
    """Whether two channel keys are the same once surrounding whitespace is ignored."""
    return a.strip() == b.strip()


# ---------------------------------------------------------------------------------------------
# Workspace keys and directory names.


def workspace_key(session_id: str) -> str:
    """The workspace (tenant) key of a session id: its platform and first segment.

    ``slack:C001:t:1.2`` and ``slack:C001:u:U4`` both give ``slack:C001``, so every scope of a
    channel shares one workspace. An id without a colon, or with an empty platform, is returned
    stripped; ``slack:`` gives ``slack``; ``""`` gives ``""``.
    """
    trimmed = session_id.strip()
    if not trimmed:
        return ""
    platform, colon, rest = trimmed.partition(":")
    if not colon or not platform:
        return trimmed
    segment = rest.split(":", 1)[0]
    return f"{platform}:{segment}" if segment else platform


NameDialect = Literal["agentsession", "agentkit"]
"""Which rule turns a workspace key into a directory name: agentsession's injective one, or
agentkit's (``WorkspaceDirName``), for a directory tree shared with an agentkit service."""

_AGENTKIT_DIR_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def workspace_dir_name(key: str, *, dialect: NameDialect = "agentsession") -> str:
    """One safe directory name for a workspace key (``""`` for ``""``).

    Same as ``workspace_local_dir_name(key, omit_platform=False, dialect=dialect)``.
    """
    return workspace_local_dir_name(key, omit_platform=False, dialect=dialect)


def workspace_local_dir_name(
    key: str, omit_platform: bool = False, *, dialect: NameDialect = "agentsession"
) -> str:
    """One safe directory name for a workspace key, optionally without its platform.

    With the default ``dialect="agentsession"`` the name comes from
    :func:`agentsession._names.safe_name`: common keys stay readable (``slack:C123ABC`` →
    ``slack_C123ABC``, ``cli:default`` → ``cli_default``, ``a.b`` → ``a.b``), the name is never
    empty, ``.`` or ``..``, never contains ``..``, ``/``, ``\\`` or NUL, and two different keys
    never share a name.

    With ``omit_platform`` the key is first replaced by its first routing segment (what follows
    the first ``:`` up to the next; a key without ``:`` is used whole, stripped), so
    ``slack:C123ABC`` → ``C123ABC``. Keys of different platforms with the same channel then
    share a directory by design; different segments still never do.

    Deliberate difference from agentkit: agentkit replaces ``:`` *and* every other unsafe
    character with ``_``, so ``a:b``, ``a_b`` and ``a/b`` share one directory. Here ``_`` itself
    is escaped (``%5F``) to keep names distinct, so ``chat-api:slack_D0AK`` with
    ``omit_platform`` gives ``slack%5FD0AK`` where agentkit gives ``slack_D0AK``.

    ``dialect="agentkit"`` gives agentkit's own names (``WorkspaceLocalDirName``), for tenant
    directories shared with an agentkit service: ``[A-Za-z0-9_-]`` are kept, every other
    character becomes ``_``, a ``.`` is kept unless the one before it was kept as a dot (then it
    becomes ``_``, so ``....`` → ``.___``), and ``""`` or ``.`` becomes ``_``. Such a name never
    contains ``..`` or a separator and is never ``.`` or ``..``, but different keys can share it
    (``chat-api:slack_D0AK`` and ``chat-api:slack:D0AK`` both give ``slack_D0AK`` with
    ``omit_platform``). Any other ``dialect`` raises :class:`UsageError`.
    """
    if dialect not in ("agentsession", "agentkit"):
        raise UsageError(f"dialect must be 'agentsession' or 'agentkit', not {dialect!r}")
    if not key:
        return ""
    if omit_platform:
        key = _first_routing_segment(key)
        if not key:
            return ""
    if dialect == "agentkit":
        return _agentkit_dir_name(key)
    return safe_name(key)


def _agentkit_dir_name(key: str) -> str:
    out: list[str] = []
    after_dot = False  # the previous character was written as a dot; a run of dots keeps it
    for ch in key:
        if ch in _AGENTKIT_DIR_KEEP:
            out.append(ch)
            after_dot = False
        elif ch == ".":
            out.append("_" if after_dot else ".")
            after_dot = True
        else:
            out.append("_")
            after_dot = False
    name = "".join(out)
    return "_" if name in ("", ".") else name


def _first_routing_segment(key: str) -> str:
    trimmed = key.strip()
    _, colon, rest = trimmed.partition(":")
    if not colon:
        return trimmed
    return rest.split(":", 1)[0]


# ---------------------------------------------------------------------------------------------
# Fresh ids.

DEFAULT_CLI_SESSION_ID: Final = "cli:default"
"""The CLI's session when no ``/new`` has happened."""

_SUFFIX_LENGTH: Final = 16


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _fresh_stamp() -> str:
    """``YYYYMMDD-HHMMSS.mmm-<16 base32 characters>``: the UTC millisecond, then 80 random bits.

    The same idea as ULID and UUIDv7 (a time prefix that sorts, then enough randomness that ids
    made anywhere at the same millisecond do not collide: 2**-80 for a pair), with no state
    shared across threads or processes. The stamp stays readable; the suffix is lower-case
    base32, safe in file names.
    """
    now = _utcnow()
    stamp = now.strftime("%Y%m%d-%H%M%S.") + f"{now.microsecond // 1000:03d}"
    suffix = base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()
    return f"{stamp}-{suffix[:_SUFFIX_LENGTH]}"


def new_cli_session_id() -> str:
    """A fresh CLI session id: ``cli:YYYYMMDD-HHMMSS.mmm-<suffix>`` (UTC, then 16 random
    lower-case base32 characters).

    Ids sort by creation time (to the millisecond) and never collide, even when made in the
    same millisecond. agentkit's form has no suffix and can collide.
    """
    return f"cli:{_fresh_stamp()}"


def new_session_id(base: str = "") -> str:
    """A fresh session id derived from ``base``: ``base:new:YYYYMMDD-HHMMSS.mmm-<suffix>``
    (16 random base32 characters, as :func:`new_cli_session_id`).

    An empty ``base``, or one starting with ``cli:``, gives :func:`new_cli_session_id`.
    """
    if not base or base.startswith("cli:"):
        return new_cli_session_id()
    return f"{base}:new:{_fresh_stamp()}"


def child_conversation_id(parent: str, agent_name: str, seq: int) -> str:
    """The conversation id of a subagent: ``parent:sub:agent_name:seq``."""
    return f"{parent}:sub:{agent_name}:{seq}"


def slack_session_id(channel: str, ts: str = "") -> str:
    """``slack:channel``, or ``slack:channel:t:ts`` for a thread."""
    if not ts:
        return f"slack:{channel}"
    return f"slack:{channel}:{_THREAD_MARK}:{ts}"


def slack_session_id_for_scope(scope: str, channel: str, ts: str, user: str) -> str:
    """The Slack conversation key under ``scope``; ``""`` when the channel is blank."""
    delivery = build_delivery_id("slack", channel, ts, user)
    if not delivery:
        return ""
    return apply_scope(delivery, scope, user)


# ---------------------------------------------------------------------------------------------
# Route refs.

ROUTE_KIND_SESSION: Final = "session"
"""The route kind whose target is a :class:`SessionRouteTarget` (an IM-style delivery inbox)."""

_NO_TARGET: Final = msgspec.Raw()


def _has_json(raw: msgspec.Raw) -> bool:
    return len(raw) > 0 and bytes(raw).strip() != b"null"


class SessionRouteTarget(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """The target of a ``session`` route. JSON keys are camelCase (``deliveryId``, …)."""

    delivery_id: str = ""
    """The stable return path, a delivery id; derived from the other fields when empty."""
    channel_id: str = ""
    """The channel."""
    thread_id: str = ""
    """The thread, if any."""
    scope_user_id: str = ""
    """The ``:u:`` segment of the delivery (a routing scope, not necessarily the speaker)."""
    reply_to: str = ""
    """The inbound message to reply to during this turn; not part of the delivery key."""

    def has_target(self) -> bool:
        """Whether a delivery id or a channel is set (ignoring whitespace)."""
        return bool(self.delivery_id.strip() or self.channel_id.strip())


class RouteRef(msgspec.Struct, frozen=True, omit_defaults=True):
    """Where outbound events for a turn are delivered.

    JSON: ``{"platform": …, "kind": …, "target": …}``, empty fields left out. ``target`` is
    kept as raw JSON (its schema depends on ``kind``); read it with :func:`decode_session_route`.
    Read JSON with :func:`decode_route_ref`, which also accepts agentkit's legacy forms.
    """

    platform: str = ""
    """Platform id (``slack``)."""
    kind: str = ""
    """Target schema; ``session`` (:data:`ROUTE_KIND_SESSION`) is the only one defined."""
    target: msgspec.Raw = _NO_TARGET
    """The target as encoded JSON; empty when there is none (JSON ``null`` counts as none)."""

    def __post_init__(self) -> None:
        # omit_defaults compares by identity: an empty Raw that is not the default would be
        # written as `"target":` (invalid JSON), so every "no target" becomes the default.
        if self.target is not _NO_TARGET and not _has_json(self.target):
            msgspec.structs.force_setattr(self, "target", _NO_TARGET)

    def __hash__(self) -> int:
        # msgspec.Raw is not hashable; hash its bytes so routes can be set members and keys.
        return hash((self.platform, self.kind, bytes(self.target)))

    def __repr__(self) -> str:
        target = bytes(self.target).decode("utf-8", "replace")
        return f"RouteRef(platform={self.platform!r}, kind={self.kind!r}, target={target!r})"

    def is_zero(self) -> bool:
        """True when platform and kind are blank and there is no target."""
        return not self.platform.strip() and not self.kind.strip() and not self.has_target()

    def has_target(self) -> bool:
        """True when a target payload is present."""
        return self.target is not _NO_TARGET


class _RouteRefWire(msgspec.Struct, rename="camel"):
    # Every shape agentkit has written a RouteRef in.
    platform: str = ""
    kind: str = ""
    target: msgspec.Raw = _NO_TARGET
    session: msgspec.Raw = _NO_TARGET
    data: msgspec.Raw = _NO_TARGET
    session_id: str = ""
    channel_id: str = ""
    thread_id: str = ""
    message_id: str = ""
    user_id: str = ""

    def to_route(self) -> RouteRef:
        for payload in (self.target, self.session, self.data):
            if _has_json(payload):
                return RouteRef(platform=self.platform, kind=self.kind, target=payload)
        legacy = SessionRouteTarget(
            delivery_id=self.session_id.strip(),
            channel_id=self.channel_id.strip(),
            thread_id=self.thread_id.strip(),
            reply_to=self.message_id.strip(),
            scope_user_id=self.user_id.strip(),
        )
        if not legacy.has_target():
            return RouteRef(platform=self.platform, kind=self.kind)
        return RouteRef(platform=self.platform, kind=self.kind, target=msgspec.Raw(encode(legacy)))


class _IdPayload(msgspec.Struct):
    id: str = ""


def encode_route_ref(route: RouteRef) -> bytes:
    """``route`` as JSON, always in the current form (``platform``, ``kind``, ``target``)."""
    return encode(route)


def decode_route_ref(data: bytes | bytearray | memoryview | str | Mapping[str, Any]) -> RouteRef:
    """Read a route ref from JSON (bytes or text) or from already-decoded JSON data.

    Accepts the current form and agentkit's legacy ones, tried in this order: ``target``; a
    ``session`` payload; a ``data`` payload (an object or a string); the flat fields
    ``sessionId`` (the delivery id), ``channelId``, ``threadId``, ``messageId`` (reply to) and
    ``userId`` (scope user), used only when a delivery id or channel is among them. Raises
    :class:`UsageError` when the input is not a JSON object of that shape.
    """
    buf: bytes | bytearray | memoryview | str = (
        encode(dict(data)) if isinstance(data, Mapping) else data
    )
    try:
        wire = decode(bytes(buf) if isinstance(buf, bytearray) else buf, _RouteRefWire)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"not a route ref: {exc}") from None
    return wire.to_route()


def _route(platform: str, target: SessionRouteTarget) -> RouteRef:
    return RouteRef(
        platform=platform.strip(), kind=ROUTE_KIND_SESSION, target=msgspec.Raw(encode(target))
    )


def build_session_route(platform: str, target: SessionRouteTarget) -> RouteRef:
    """A ``session`` route to ``target`` on ``platform``.

    Every field is stripped. When the delivery id is empty but platform and channel are set, it
    is built from platform, channel, thread and scope user. Raises :class:`UsageError` when a
    part of that id contains ``:``.
    """
    platform = platform.strip()
    channel = target.channel_id.strip()
    thread = target.thread_id.strip()
    scope_user = target.scope_user_id.strip()
    delivery = target.delivery_id.strip()
    if not delivery and platform and channel:
        delivery = build_delivery_id(platform, channel, thread, scope_user)
    return _route(
        platform,
        SessionRouteTarget(
            delivery_id=delivery,
            channel_id=channel,
            thread_id=thread,
            scope_user_id=scope_user,
            reply_to=target.reply_to.strip(),
        ),
    )


def session_route_from_delivery(platform: str, delivery: str, reply_to: str = "") -> RouteRef:
    """A ``session`` route for a delivery id, its channel, thread and user filled in.

    A blank delivery gives the zero route; a non-routable one (``cli:default``) a target with
    only the delivery id and ``reply_to``.
    """
    delivery = delivery.strip()
    if not delivery:
        return RouteRef()
    parts = parse_delivery(delivery)
    if not parts.routable:
        return _route(platform, SessionRouteTarget(delivery_id=delivery, reply_to=reply_to.strip()))
    return build_session_route(
        platform,
        SessionRouteTarget(
            delivery_id=delivery,
            channel_id=parts.channel,
            thread_id=parts.thread,
            scope_user_id=parts.user,
            reply_to=reply_to,
        ),
    )


def decode_session_route(route: RouteRef) -> SessionRouteTarget:
    """The target of a ``session`` route (a route with an empty kind is taken as one).

    The target may be a :class:`SessionRouteTarget` object naming a delivery id or channel, a
    JSON string (the delivery id) or a legacy ``{"id": …}`` object. Raises :class:`UsageError`
    for another kind, a missing target, or a target naming no delivery.
    """
    if route.kind and route.kind != ROUTE_KIND_SESSION:
        raise UsageError(f"route kind {route.kind!r} is not {ROUTE_KIND_SESSION!r}")
    if not route.has_target():
        raise UsageError("route has no target")
    raw = bytes(route.target)
    try:
        target = decode(raw, SessionRouteTarget)
        if target.has_target():
            return target
    except (ValueError, TypeError):
        pass
    try:
        delivery = decode(raw, str).strip()
        if delivery:
            return SessionRouteTarget(delivery_id=delivery)
    except (ValueError, TypeError):
        pass
    try:
        delivery = decode(raw, _IdPayload).id.strip()
        if delivery:
            return SessionRouteTarget(delivery_id=delivery)
    except (ValueError, TypeError):
        pass
    raise UsageError("route target names no delivery id or channel")


def route_session_id(route: RouteRef) -> str:
    """The delivery id a route returns to.

    The target's delivery id when set, else one built from the route's platform and the
    target's channel, thread and scope user. Raises :class:`UsageError` when neither is there.
    """
    target = decode_session_route(route)
    delivery = target.delivery_id.strip()
    if delivery:
        return delivery
    platform = route.platform.strip()
    channel = target.channel_id.strip()
    if platform and channel:
        built = build_delivery_id(platform, channel, target.thread_id, target.scope_user_id)
        if built:
            return built
    raise UsageError("route names neither a delivery id nor a platform and channel")


def route_target_from_route(route: RouteRef) -> SessionRouteTarget:
    """The route's target with every field stripped and the delivery id always set.

    When the channel is missing, channel and thread (and the scope user, when missing) are read
    from the delivery id. Raises :class:`UsageError` as :func:`route_session_id` does.
    """
    delivery = route_session_id(route)
    target = decode_session_route(route)
    channel = target.channel_id.strip()
    thread = target.thread_id.strip()
    scope_user = target.scope_user_id.strip()
    if not channel:
        parts = parse_delivery(delivery, scope_user)
        if parts.routable:
            channel, thread = parts.channel, parts.thread
            scope_user = scope_user or parts.user
    return SessionRouteTarget(
        delivery_id=delivery,
        channel_id=channel,
        thread_id=thread,
        scope_user_id=scope_user,
        reply_to=target.reply_to.strip(),
    )


def route_reply_to(route: RouteRef) -> str:
    """The message this turn replies to (stripped), or ``""`` when the route names none."""
    try:
        return decode_session_route(route).reply_to.strip()
    except UsageError:
        return ""


class OutboundEvent(msgspec.Struct, frozen=True):
    """An event sent to a chat platform (a reply, a streaming update, a recovery notice): the
    route it goes to, who it concerns, its type and its JSON payload.

    agentkit's ``OutboundEvent``; build one for the current turn with
    :func:`agentsession.chat.outbound_from_envelope`. JSON keys are Go's field names:
    ``Route``, ``AgentID``, ``PlatformID``, ``UserID``, ``Type``, ``Data`` (encoded JSON; ``null``
    when there is none).
    """

    route: RouteRef = msgspec.field(default_factory=RouteRef, name="Route")
    """The return address captured from the inbound message."""
    agent_id: str = msgspec.field(default="", name="AgentID")
    """The agent that produced the event, when set."""
    platform_id: str = msgspec.field(default="", name="PlatformID")
    """The platform to deliver to (required for delivery: :meth:`require_platform_id`)."""
    user_id: str = msgspec.field(default="", name="UserID")
    """The user the turn came from."""
    type: str = msgspec.field(default="", name="Type")
    """The event type (``assistant/message``, ``session/recovery``, ...)."""
    data: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"null"), name="Data")
    """The payload as encoded JSON."""

    def require_platform_id(self) -> None:
        """Raise :class:`UsageError` when the event names no platform (blank ``platform_id``):
        such an event cannot be delivered (agentkit's ``ErrOutboundPlatformRequired``)."""
        if not self.platform_id.strip():
            raise UsageError("outbound event requires platformID")

    def payload(self) -> Any:
        """The payload decoded from JSON (``None`` for ``null``)."""
        return decode(bytes(self.data))


def outbound_route_id(route: RouteRef | OutboundEvent) -> str:
    """The delivery id to send an outbound event to (given the event or its route), or ``""``
    when the route has none."""
    if isinstance(route, OutboundEvent):
        route = route.route
    try:
        return route_session_id(route)
    except UsageError:
        return ""
