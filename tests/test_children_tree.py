"""``children.descendants()`` and ``children.tree()``: walks of the child-session tree, as
``rm -r``, ``shred -r`` and ``ls --tree`` use them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import agentsession as ags
from agentsession import children
from agentsession.children import CHILDREN_KIND, SessionTree
from agentsession.codec import encode
from agentsession.events import Event


@pytest.fixture
def store() -> Iterator[ags.BaseStore]:
    """``main`` with ``main:research`` (merged; its child ``main:research:helper`` active)
    and ``main:critic`` (discarded), forked in that order; an unrelated ``other``, the most
    recently active session."""
    with ags.open_store("memory:") as store:
        main = store.get("main")
        with main.turn(agent="lead") as turn:
            turn.user("plan the trip")
            turn.assistant("delegating")
        research = main.fork("researcher", task="find flights", child_id="main:research")
        research.append(Event.new("user/message", ags.Message.user("look")))
        research.fork("helper", child_id="main:research:helper")
        critic = main.fork("critic", child_id="main:critic")
        research.merge()
        critic.discard("not needed")
        store.get("other").append(Event.new("user/message", ags.Message.user("hi")))
        yield store


def close_a_cycle(store: ags.BaseStore) -> None:
    """Make ``main`` a child of its own grandchild, as a reused id can: an index entry that is
    not active is believed without reading the child's log."""
    entry = [{"id": "main", "fork_id": "reused", "agent": "loop", "state": "merged"}]
    store._meta_set(CHILDREN_KIND, "main:research:helper", encode(entry).decode())


def ids(forest: list[SessionTree]) -> list[tuple[int, str]]:
    """The forest depth first, as ``(depth, id)``."""
    out: list[tuple[int, str]] = []

    def walk(node: SessionTree, depth: int) -> None:
        out.append((depth, node.id))
        for child in node.children:
            walk(child, depth + 1)

    for top in forest:
        walk(top, 0)
    return out


# -- descendants -------------------------------------------------------------------------------


def test_descendants_are_every_session_below_with_its_parent_depth_first_in_fork_order(
    store: ags.BaseStore,
) -> None:
    below = children.descendants(store, "main")
    assert list(below.items()) == [
        ("main:research", "main"),
        ("main:research:helper", "main:research"),
        ("main:critic", "main"),
    ]
    assert children.descendants(store, "main:research") == {"main:research:helper": "main:research"}
    assert children.descendants(store, "other") == {}
    assert children.descendants(store, "no-such-session") == {}


def test_descendants_leave_out_a_child_deleted_alone(store: ags.BaseStore) -> None:
    assert store.delete("main:critic")
    assert "main:critic" not in children.descendants(store, "main")


def test_descendants_end_at_a_cycle_and_never_report_the_session_itself(
    store: ags.BaseStore,
) -> None:
    close_a_cycle(store)
    below = children.descendants(store, "main")
    assert "main" not in below
    assert list(below) == ["main:research", "main:research:helper", "main:critic"]
    # Started inside the cycle: each session once, under the first parent that names it.
    assert children.descendants(store, "main:research") == {
        "main:research:helper": "main:research",
        "main": "main:research:helper",
        "main:critic": "main",
    }


# -- tree --------------------------------------------------------------------------------------


def test_tree_puts_children_under_their_parents_with_what_the_index_says(
    store: ags.BaseStore,
) -> None:
    forest = children.tree(store, store.list())
    assert ids(forest) == [
        (0, "other"),
        (0, "main"),
        (1, "main:research"),
        (2, "main:research:helper"),
        (1, "main:critic"),
    ]
    main = forest[1]
    assert (main.agent, main.state, main.fork_seq, main.shredded) == (None, None, None, False)
    assert main.last_seq == store.get("main").latest_seq
    research, critic = main.children
    assert (research.agent, research.state, research.fork_seq) == ("researcher", "merged", 4)
    assert (critic.agent, critic.state) == ("critic", "discarded")
    assert research.children[0].state == "active"


def test_tree_shows_a_child_the_listing_left_out_without_what_only_the_listing_knows(
    store: ags.BaseStore,
) -> None:
    listed = store.list(prefix="main")
    forest = children.tree(store, [info for info in listed if info.id == "main"])
    assert ids(forest) == [
        (0, "main"),
        (1, "main:research"),
        (2, "main:research:helper"),
        (1, "main:critic"),
    ]
    research = forest[0].children[0]
    assert (research.last_seq, research.updated_at, research.size) == (None, None, None)


def test_a_listed_session_whose_parent_is_not_listed_is_at_the_top(
    store: ags.BaseStore,
) -> None:
    forest = children.tree(store, store.list(prefix="main:research"))
    assert ids(forest) == [(0, "main:research"), (1, "main:research:helper")]
    assert forest[0].state is None  # at the top: what its parent's index says is not shown


def test_tree_shows_each_session_once_when_a_cycle_closes(store: ags.BaseStore) -> None:
    close_a_cycle(store)
    forest = children.tree(store, store.list())
    shown = [sid for _, sid in ids(forest)]
    assert sorted(shown) == sorted(info.id for info in store.list())
    assert len(shown) == len(set(shown))


def test_tree_of_nothing_listed_is_empty(store: ags.BaseStore) -> None:
    assert children.tree(store, []) == []


def test_tree_nodes_are_plain_values_that_encode_as_json(store: ags.BaseStore) -> None:
    [main] = children.tree(store, [i for i in store.list() if i.id == "main"])
    data = json.loads(encode(main))
    assert list(data) == [
        "id", "last_seq", "updated_at", "size", "agent", "state", "fork_seq", "shredded",
        "children",
    ]
    assert [c["id"] for c in data["children"]] == ["main:research", "main:critic"]
