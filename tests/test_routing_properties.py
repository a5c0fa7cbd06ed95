"""Property-based tests of the delivery-id grammar, scopes and workspace directory names.

What makes the grammar ambiguous, and so what the generators leave out:

* ``:`` inside a part. The id is split on ``:`` before anything else, so a part containing one
  cannot come back (:func:`build_delivery_id` refuses it). Parts are drawn without ``:``.
* Blank platform or channel. :func:`build_delivery_id` returns ``""`` for them, which parses
  as nothing. Platform and channel are drawn non-blank after stripping.
* Surrounding whitespace. Building and parsing both strip each part, so the parts come back
  stripped; the generators do produce padded parts and the test compares stripped values.

Values spelled ``t`` or ``u`` are *not* ambiguous and are generated on purpose: the channel is
always the second segment, and after it markers and values alternate, so ``slack:t:t:u:u:t``
has channel ``t``, thread ``u`` and user ``t``. The legacy three-segment form
(``platform:channel:user``) cannot collide either, because a built id has 2, 4 or 6 segments.
The opaque platforms (``cli``, ``sub``, …) and ``schedule`` are generated too; the expected
result says when the id is not routable.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentsession.chat.routing import (
    OPAQUE_PLATFORMS,
    SCHEDULE_PLATFORM,
    SCOPES,
    Delivery,
    apply_scope,
    build_delivery_id,
    parse_delivery,
    workspace_dir_name,
    workspace_local_dir_name,
)

EXAMPLES = settings(max_examples=300, deadline=None)

no_colon = st.characters(exclude_characters=":", codec="utf-8")
part = st.text(no_colon, max_size=12)
padded = st.builds(
    lambda pad, word, tail: pad + word + tail,
    st.sampled_from(["", " ", "\t"]),
    part,
    st.sampled_from(["", " "]),
)
marker_like = st.sampled_from(["t", "u", "T", "tt", " t "])
value = part | marker_like | padded
non_blank = value.filter(lambda text: bool(text.strip()))
platform_value = non_blank | st.sampled_from(sorted(OPAQUE_PLATFORMS | {SCHEDULE_PLATFORM}))


@EXAMPLES
@given(platform=platform_value, channel=non_blank, thread=value, user=value)
def test_a_built_delivery_id_parses_back_into_its_parts(
    platform: str, channel: str, thread: str, user: str
) -> None:
    built = build_delivery_id(platform, channel, thread, user)
    p, c, t, u = platform.strip(), channel.strip(), thread.strip(), user.strip()
    if p == SCHEDULE_PLATFORM or (p in OPAQUE_PLATFORMS and not t and not u):
        expected = Delivery(platform=p, channel=c, routable=False)
    else:
        expected = Delivery(platform=p, channel=c, thread=t, user=u, routable=True)
    assert parse_delivery(built) == expected
    assert parse_delivery(built, legacy_user_segment=False) == expected


keys = st.text(st.characters(codec="utf-8"), min_size=1, max_size=60)
path_like = st.text(st.sampled_from("./\\:_%~a\x00"), min_size=1, max_size=30)


def assert_one_safe_segment(name: str) -> None:
    assert name not in ("", ".", "..")
    assert ".." not in name
    assert not set(name) & {"/", "\\", "\x00"}


@EXAMPLES
@given(key=keys | path_like)
def test_a_workspace_dir_name_is_one_safe_path_segment(key: str) -> None:
    assert_one_safe_segment(workspace_dir_name(key))
    local = workspace_local_dir_name(key, omit_platform=True)
    _, colon, rest = key.strip().partition(":")
    segment = rest.split(":", 1)[0] if colon else key.strip()
    if segment:
        assert_one_safe_segment(local)
    else:
        assert local == ""  # "slack:", "a::b" and blank keys name no directory of their own


@EXAMPLES
@given(a=keys | path_like, b=keys | path_like)
def test_different_keys_get_different_directory_names(a: str, b: str) -> None:
    if a != b:
        assert workspace_dir_name(a) != workspace_dir_name(b)


@EXAMPLES
@given(a=part, b=part)
def test_keys_that_agentkit_merged_stay_apart(a: str, b: str) -> None:
    # agentkit turns ":" and every unsafe character into "_", so these pairs collided.
    assert workspace_dir_name(f"{a}:{b}") != workspace_dir_name(f"{a}_{b}")
    assert workspace_dir_name(f"{a}/{b}") != workspace_dir_name(f"{a}_{b}")


any_delivery = st.text(st.characters(codec="utf-8"), max_size=40)
structured_delivery = st.lists(value, min_size=0, max_size=7).map(":".join)
user_id = st.text(no_colon, max_size=8)  # a user id with ":" cannot be written into an id


@EXAMPLES
@given(delivery=any_delivery | structured_delivery, scope=st.sampled_from(SCOPES), user=user_id)
def test_apply_scope_is_idempotent(delivery: str, scope: str, user: str) -> None:
    once = apply_scope(delivery, scope, user)
    assert apply_scope(once, scope, user) == once
