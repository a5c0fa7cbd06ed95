"""One source of signatures: the sync API, the async API and ``contract.py`` are written by
hand, and these tests compare every public method and property of each pair, parameter by
parameter (names, kinds, defaults, annotations), so that a parameter added to one and not the
other fails here.

The pairs: :class:`~agentsession.BaseStore` and :class:`~agentsession.aio.AsyncStore`,
:class:`~agentsession.BaseSession` and :class:`~agentsession.aio.AsyncSession`,
:class:`~agentsession.Turn`/:class:`~agentsession.Step` and their async wrappers, and the
protocols of :mod:`agentsession.contract` and the classes that implement them.

Annotations are compared as evaluated types, with the sync API's own classes mapped to their
async counterparts (a sync ``get`` returns a ``BaseSession``, the async one an
``AsyncSession``). Every departure from "the same name, the same parameters" is listed below,
each with its reason.
"""

from __future__ import annotations

import functools
import inspect
import operator
import types
import typing
from collections.abc import AsyncIterator, Callable, Generator, Mapping

import pytest

from agentsession import BaseSession, BaseStore, Step, Turn, TurnLock, contract
from agentsession.aio import (
    AsyncDelivery,
    AsyncSession,
    AsyncStep,
    AsyncStore,
    AsyncTurn,
    AsyncTurnLock,
)
from agentsession.aio._store import AsyncLifecycleHook
from agentsession.children import LifecycleHook
from agentsession.events import Event
from agentsession.fencing import Lease
from agentsession.follow import Change
from agentsession.inbox import Delivery

# -- the allow-lists --------------------------------------------------------------------------

SYNC_ONLY: Mapping[tuple[str, str], str] = {
    ("BaseStore", "capabilities"): (
        "what the backend's I/O costs, declared for the async API's placement: read on "
        "store.sync; the async store's placement is store.backend"
    ),
    ("BaseStore", "current_lease"): (
        "the sync lease current in the thread or task; an async task reads the same one "
        "(store.sync.current_lease), entered by `async with store.lock(...)`"
    ),
    ("Turn", "step_boundary"): (
        "the boundary a sync driver makes before its own step; the async turn makes it when "
        "its step is entered (`async with turn.step()`)"
    ),
    ("Turn", "interruption_seen"): (
        "what the latest look at the log saw, without I/O; the async turn's `interrupted` is "
        "that already"
    ),
    ("Lease", "current"): (
        "a sync context manager over the context of the caller; `async with` on the async "
        "lock makes its lease current in the task"
    ),
    ("BaseStore", "async_backend"): (
        "the hook the async API opens a backend's native async I/O through; the async store "
        "holds the result as store.backend"
    ),
    ("BaseSession", "log_identity"): (
        "identifies the stored log within the process for the sync layer's caches and turn "
        "locks; the async session is one per sync object (session.sync.log_identity)"
    ),
    ("BaseSession", "encrypted"): (
        "in-memory state the async placement reads on the sync object (session.sync.encrypted)"
    ),
    ("BaseSession", "plans"): (
        "the sync pipeline's plans, which the async API drives on a native log itself"
    ),
    ("BaseSession", "state_lock"): (
        "the sync object's own thread lock, which the async placement tries without waiting; "
        "a task must never block on it"
    ),
    ("BaseSession", "window_loaded"): (
        "in-memory state the async placement reads on the sync object"
    ),
    ("BaseSession", "window_holds"): (
        "in-memory state the async placement reads on the sync object"
    ),
    ("BaseSession", "history_in_memory"): (
        "in-memory state the async placement reads on the sync object"
    ),
}
"""Public names of a sync class that its async counterpart deliberately lacks."""

ASYNC_ONLY: Mapping[tuple[str, str], str] = {
    ("AsyncStore", "sync"): "the sync store it wraps",
    ("AsyncStore", "backend"): "where its operations run (the async API's own placement)",
    ("AsyncStore", "closed"): (
        "whether close() ran: the async store closes its thread pool and native backend too, "
        "and a lock released afterwards must not reach them"
    ),
    ("AsyncSession", "sync"): "the sync session it wraps",
    ("AsyncSession", "store"): "the async store it came from (the sync session has none public)",
    ("AsyncTurn", "sync"): "the sync turn it wraps",
    ("AsyncStep", "sync"): "the sync step it wraps",
    ("AsyncTurnLock", "acquire"): (
        "an async lock object is made first and then taken (`await`, `async with`); a sync "
        "one is taken by store.lock() itself"
    ),
    ("AsyncTurnLock", "timeout"): "the wait it was asked for, kept until it is taken",
    ("AsyncTurnLock", "steal_after"): "the steal it was asked for, kept until it is taken",
    ("AsyncTurnLock", "lease"): "the sync lease it took (an async lock is made before it is taken)",
}
"""Public names of an async class that its sync counterpart deliberately lacks."""

STAYS_PLAIN: Mapping[tuple[str, str], str] = {
    ("AsyncStore", "lock"): "returns an AsyncTurnLock, taken by `async with` or `await`",
    ("AsyncStore", "holds_lock"): "reads the held-lock registry in memory: no I/O",
    ("AsyncTurnLock", "lost_error"): "marks the lease lost in memory: no I/O",
    ("AsyncStore", "add_lifecycle_hook"): "registers a function: no I/O",
    ("AsyncStore", "remove_lifecycle_hook"): "unregisters a function: no I/O",
    ("AsyncSession", "turn"): "returns an AsyncTurn, entered by `async with`",
    ("AsyncSession", "retry"): "returns an AsyncTurn, entered by `async with` (which rewinds)",
    ("AsyncSession", "edit"): "returns an AsyncTurn, entered by `async with` (which rewinds)",
    ("AsyncTurn", "step"): "returns an AsyncStep, entered by `async with`",
    ("AsyncTurn", "timed_out"): "marks the turn in memory: no I/O",
    ("AsyncTurn", "new_messages"): (
        "returns what the latest step boundary handed over, kept in memory: no I/O (the "
        "boundary's read is done when the AsyncStep is entered)"
    ),
    ("AsyncSession", "pending"): (
        "an async generator (`async for d in session.pending(lock)`), as the sync one is a "
        "generator; each step of it is a call"
    ),
    ("AsyncSession", "follow"): (
        "an async generator (`async for e in session.follow()`), as the sync one is a "
        "generator; it waits on the event loop, cancellable"
    ),
    ("AsyncStore", "changes"): (
        "an async generator (`async for c in store.changes()`), as the sync one is a "
        "generator; each step of it is a call"
    ),
    ("AsyncSession", "subscribe"): "returns a Subscription (no I/O), awaited by await_sign",
}
"""Sync methods whose async counterpart is a plain method, not a coroutine function."""

BECOMES_COROUTINE: Mapping[tuple[str, str], str] = {
    ("AsyncSession", "latest_seq"): "catches up with other writers: may read storage",
    ("AsyncSession", "parent"): "reads the session record: may read storage",
    ("AsyncSession", "fork_point"): "reads the session record: may read storage",
}
"""Sync properties whose async counterpart is a coroutine method (they may do I/O)."""

WIDENED: Mapping[tuple[str, str, str], str] = {
    ("AsyncStore", "add_lifecycle_hook", "hook"): "also takes a coroutine function",
    ("AsyncStore", "remove_lifecycle_hook", "hook"): "also takes a coroutine function",
}
"""Async parameters whose type is a union holding the sync one and more."""

STRUCTURAL: Mapping[tuple[str, str, str], str] = {
    ("AsyncSession", "pending", "lease"): (
        "takes the sync lease or any taken lock holding one (LeaseHolder, a protocol: the "
        "AsyncTurnLock is defined in aio._store, which imports aio._session)"
    ),
}
"""Async parameters whose type is a union holding the sync one (unmapped) and a protocol that
the sync type's async counterpart satisfies."""

TO_ASYNC: Mapping[object, object] = {
    BaseStore: AsyncStore,
    BaseSession: AsyncSession,
    contract.Session: AsyncSession,
    Turn: AsyncTurn,
    Step: AsyncStep,
    TurnLock: AsyncTurnLock,
    Lease: AsyncTurnLock,
    Delivery: AsyncDelivery,
    Generator[Delivery, None, None]: AsyncIterator[AsyncDelivery],
    Generator[Event, None, None]: AsyncIterator[Event],
    Generator[Change, None, None]: AsyncIterator[Change],
}
"""The sync API's classes, and what the async API returns in their place (a sync generator
of deliveries is an async iterator of async ones; of events or changes, an async iterator of
the same)."""

PROTOCOL_TO_CLASS: Mapping[object, object] = {contract.Session: BaseSession}
"""A protocol's return types, as the class implementing it declares them (a subtype)."""

PAIRS: list[tuple[type, type]] = [
    (BaseStore, AsyncStore),
    (BaseSession, AsyncSession),
    (Turn, AsyncTurn),
    (Step, AsyncStep),
    (Lease, AsyncTurnLock),
]

PROTOCOLS: list[tuple[type, type]] = [
    (contract.Store, BaseStore),
    (contract.Session, BaseSession),
]


# -- reading a class ---------------------------------------------------------------------------


def _public(cls: type) -> dict[str, object]:
    """The public members of ``cls`` (its bases included), as stored on the class."""
    members: dict[str, object] = {}
    for name in dir(cls):
        if not name.startswith("_"):
            members[name] = inspect.getattr_static(cls, name)
    return members


def _without(member: object, param: str) -> Callable[..., object]:
    """``member`` (a method) seen without its parameter ``param``, for the comparison."""
    fn = member.fget if isinstance(member, property) else member
    assert callable(fn)
    signature = inspect.signature(fn, eval_str=True)

    def stand_in(*args: object, **kwargs: object) -> object:
        raise NotImplementedError

    params = [p for p in signature.parameters.values() if p.name != param]
    stand_in.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return stand_in


def _signature(member: object) -> inspect.Signature:
    """The signature of a method, or of a property's getter, with evaluated annotations and
    without ``self``."""
    fn = member.fget if isinstance(member, property) else member
    assert callable(fn), member
    signature = inspect.signature(fn, eval_str=True)
    params = list(signature.parameters.values())[1:]
    return signature.replace(parameters=params)


def _substitute(annotation: object, mapping: Mapping[object, object]) -> object:
    """``annotation`` with every class in ``mapping`` replaced, also inside generics and
    unions."""
    if annotation in mapping:
        return mapping[annotation]
    args = typing.get_args(annotation)
    if not args:
        return annotation
    new_args = tuple(
        [_substitute(a, mapping) for a in arg]
        if isinstance(arg, list)  # a Callable's parameter list
        else _substitute(arg, mapping)
        for arg in args
    )
    if new_args == args:
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        return functools.reduce(operator.or_, new_args)
    assert origin is not None
    return origin[new_args]


def _union_members(annotation: object) -> set[object]:
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        return set(typing.get_args(annotation))
    return {annotation}


def _compare(
    where: str,
    expected: inspect.Signature,
    actual: inspect.Signature,
    mapping: Mapping[object, object],
    widened: Callable[[str], bool] = lambda name: False,
) -> list[str]:
    """How ``actual`` departs from ``expected`` (with ``mapping`` applied to its
    annotations)."""
    problems: list[str] = []
    want = list(expected.parameters.values())
    have = list(actual.parameters.values())
    if [p.name for p in want] != [p.name for p in have]:
        problems.append(
            f"{where}: parameters {[p.name for p in have]}, expected {[p.name for p in want]}"
        )
        return problems
    for w, h in zip(want, have, strict=True):
        if w.kind != h.kind:
            problems.append(f"{where}({w.name}): kind {h.kind.name}, expected {w.kind.name}")
        if w.default != h.default:
            problems.append(f"{where}({w.name}): default {h.default!r}, expected {w.default!r}")
        annotation = _substitute(w.annotation, mapping)
        if widened(w.name):
            if not _union_members(annotation) <= _union_members(h.annotation):
                problems.append(f"{where}({w.name}): {h.annotation} does not hold {annotation}")
        elif annotation != h.annotation:
            problems.append(f"{where}({w.name}): annotation {h.annotation}, expected {annotation}")
    returns = _substitute(expected.return_annotation, mapping)
    if returns != actual.return_annotation:
        problems.append(f"{where}: returns {actual.return_annotation}, expected {returns}")
    return problems


# -- sync and async ----------------------------------------------------------------------------


def _instance_attributes(cls: type) -> set[str]:
    """The public attributes an object of ``cls`` sets on itself (not declared on the class):
    a sync turn's, step's or turn lock's, an async turn lock's."""
    from agentsession.backends.memory import MemoryStore

    if cls is AsyncTurnLock:
        lock = AsyncTurnLock(None, "s", None)  # type: ignore[arg-type]  # never taken
        return {n for n in vars(lock) if not n.startswith("_")}
    if cls not in (Turn, Step, Lease):
        return set()
    with MemoryStore() as store:
        if cls is Lease:
            with store.lock("s") as lock:
                return {n for n in vars(lock) if not n.startswith("_")}
        with store.get("s").turn() as turn:
            obj = turn if cls is Turn else turn.step()
            return {n for n in vars(obj) if not n.startswith("_")}


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=lambda c: c.__name__)
def test_every_public_member_has_its_counterpart(sync_cls: type, async_cls: type) -> None:
    sync = set(_public(sync_cls)) | _instance_attributes(sync_cls)
    have = set(_public(async_cls)) | _instance_attributes(async_cls)
    missing = {n for n in sync - have if (sync_cls.__name__, n) not in SYNC_ONLY}
    extra = {n for n in have - sync if (async_cls.__name__, n) not in ASYNC_ONLY}
    assert not missing, f"{async_cls.__name__} lacks {sorted(missing)}"
    assert not extra, f"{sync_cls.__name__} lacks {sorted(extra)}"


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=lambda c: c.__name__)
def test_every_public_signature_is_the_same_sync_and_async(
    sync_cls: type, async_cls: type
) -> None:
    problems: list[str] = []
    sync_members, async_members = _public(sync_cls), _public(async_cls)
    for name in sorted(set(sync_members) & set(async_members)):
        key = (async_cls.__name__, name)
        where = f"{async_cls.__name__}.{name}"
        sync, asynchronous = sync_members[name], async_members[name]
        if isinstance(sync, property):
            if key in BECOMES_COROUTINE:
                if not inspect.iscoroutinefunction(asynchronous):
                    problems.append(f"{where} should be a coroutine function")
                    continue
            elif not isinstance(asynchronous, property):
                problems.append(f"{where} should be a property")
                continue
            elif (sync.fset is None) != (asynchronous.fset is None):
                problems.append(f"{where}: settable differs")
        elif not callable(sync):
            problems.append(f"{where}: a sync class attribute needs an entry in SYNC_ONLY")
            continue
        elif key in STAYS_PLAIN:
            if inspect.iscoroutinefunction(asynchronous) or not callable(asynchronous):
                problems.append(f"{where} should be a plain method")
                continue
        elif not inspect.iscoroutinefunction(asynchronous):
            problems.append(f"{where} should be a coroutine function")
            continue

        def widened(param: str, name: str = name) -> bool:
            return (async_cls.__name__, name, param) in WIDENED

        for param in _signature(sync).parameters.values():
            if (async_cls.__name__, name, param.name) in STRUCTURAL:
                held = _signature(asynchronous).parameters[param.name].annotation
                if param.annotation not in _union_members(held):
                    problems.append(f"{where}({param.name}): {held} lacks {param.annotation}")
                # the protocol is checked against the async counterpart by the inbox tests
                sync = _without(sync, param.name)
                asynchronous = _without(asynchronous, param.name)

        problems += _compare(
            where, _signature(sync), _signature(asynchronous), TO_ASYNC, widened
        )
    assert not problems, "\n".join(problems)


def test_turn_attributes_are_async_properties() -> None:
    """A sync turn's and step's public attributes are read (and ``partial`` written) through
    properties of the async ones."""
    for sync_cls, async_cls, settable in ((Turn, AsyncTurn, {"partial"}), (Step, AsyncStep, set())):
        for name in _instance_attributes(sync_cls):
            member = inspect.getattr_static(async_cls, name)
            assert isinstance(member, property), f"{async_cls.__name__}.{name}"
            assert (member.fset is not None) == (name in settable), f"{async_cls.__name__}.{name}"


def test_every_allow_list_entry_is_still_needed() -> None:
    """An allow-list entry for a name that is now on both sides (or on neither) is stale."""
    classes = {cls.__name__: cls for pair in PAIRS for cls in pair}
    counterpart = {s.__name__: a for s, a in PAIRS} | {a.__name__: s for s, a in PAIRS}

    def names(cls: type) -> set[str]:
        return set(_public(cls)) | _instance_attributes(cls)

    for table in (SYNC_ONLY, ASYNC_ONLY):
        for cls_name, name in table:
            assert name in names(classes[cls_name]), f"{cls_name}.{name} is gone"
            assert name not in names(counterpart[cls_name]), f"{cls_name}.{name} is on both"
    for table2 in (STAYS_PLAIN, BECOMES_COROUTINE):
        for cls_name, name in table2:
            assert name in _public(classes[cls_name]), f"{cls_name}.{name} is gone"
    for cls_name, name, _param in [*WIDENED, *STRUCTURAL]:
        assert name in _public(classes[cls_name]), f"{cls_name}.{name} is gone"
    for reason in [*SYNC_ONLY.values(), *ASYNC_ONLY.values(), *STAYS_PLAIN.values(),
                   *BECOMES_COROUTINE.values(), *WIDENED.values(), *STRUCTURAL.values()]:
        assert reason.strip()


def test_the_mapping_reaches_inside_generics() -> None:
    """The comparison maps sync classes inside unions and generics too (so that a drift there
    is seen)."""
    assert _substitute(list[BaseSession], TO_ASYNC) == list[AsyncSession]
    assert _substitute(BaseSession | None, TO_ASYNC) == AsyncSession | None
    assert _substitute(LifecycleHook, TO_ASYNC) == LifecycleHook
    assert _union_members(LifecycleHook | AsyncLifecycleHook) >= {LifecycleHook}


def test_a_drifted_parameter_is_reported() -> None:
    """The check fails on the drift it exists for: a keyword one side lacks."""

    class Sync:
        def delete(self, session_id: str, *, recursive: bool = False) -> bool:
            raise NotImplementedError

    class Async:
        async def delete(self, session_id: str) -> bool:
            raise NotImplementedError

    problems = _compare("delete", _signature(Sync.delete), _signature(Async.delete), {})
    assert problems and "recursive" in problems[0]


# -- contract.py -------------------------------------------------------------------------------


def _protocol_members(protocol: type) -> dict[str, object]:
    return {
        name: inspect.getattr_static(protocol, name)
        for name in protocol.__dict__
        if not name.startswith("_")
    }


@pytest.mark.parametrize(("protocol", "cls"), PROTOCOLS, ids=lambda c: c.__name__)
def test_contract_protocols_match_the_classes(protocol: type, cls: type) -> None:
    """Every member of a ``contract.py`` protocol is the class's, with the same parameters; a
    protocol may leave members out (it is what code typed against it needs), never change
    one."""
    members = _public(cls)
    problems: list[str] = []
    for name, member in _protocol_members(protocol).items():
        where = f"{protocol.__name__}.{name}"
        if name not in members:
            problems.append(f"{where}: {cls.__name__} has no {name}")
            continue
        implementation = members[name]
        if isinstance(member, property) != isinstance(implementation, property):
            problems.append(f"{where}: property in one, method in the other")
            continue
        problems += _compare(
            where, _signature(member), _signature(implementation), PROTOCOL_TO_CLASS
        )
    assert not problems, "\n".join(problems)


def test_the_protocols_are_kept_by_the_classes() -> None:
    from agentsession.backends.memory import MemoryStore

    with MemoryStore() as store:
        assert isinstance(store, contract.Store)
        assert isinstance(store.get("s"), contract.Session)


def test_every_async_member_has_a_docstring() -> None:
    for cls in (AsyncStore, AsyncSession, AsyncTurn, AsyncStep):
        for name, member in _public(cls).items():
            doc = member.__doc__ if not isinstance(member, property) else member.fget.__doc__
            assert doc, f"{cls.__name__}.{name} has no docstring"

