"""The module graph of ``src/agentsession`` is the architecture: these tests keep it honest.

Every import counts, also those under ``TYPE_CHECKING`` and inside functions: a cycle hidden in
a lazy import is still a cycle for a reader.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

import agentsession
import agentsession.chat

SRC = Path(agentsession.__file__).parent
PACKAGE = "agentsession"

CORE_NAMES = {
    "AttachmentRef",
    "BaseSession",
    "BaseStore",
    "ConflictError",
    "CopyReport",
    "CorruptLogError",
    "DuplicateSession",
    "Durability",
    "Event",
    "FilePart",
    "ImagePart",
    "IncompleteTurn",
    "EncryptionError",
    "Lease",
    "LeaseLost",
    "LockTimeout",
    "Message",
    "Part",
    "RecoveryReport",
    "OutcomeUnknown",
    "RunState",
    "Session",
    "SessionError",
    "SessionExpired",
    "SessionInfo",
    "SessionNotFound",
    "Step",
    "StorageError",
    "Store",
    "StoreRecoveryReport",
    "StoreUnavailable",
    "TextPart",
    "ThinkingPart",
    "ToolCall",
    "ToolResult",
    "Turn",
    "TurnLock",
    "UsageError",
    "__version__",
    "copy_store",
    "events",
    "load_run_state",
    "open_store",
    "repair_incomplete",
    "scan_incomplete",
}

CHAT_NAMES = {
    "EVENT_ID_KEY",
    "deliver",
    "TENANT_TOOL_WORK_DIR",
    "ActorRef",
    "Command",
    "CommandRegistry",
    "CommandReply",
    "MessageEvent",
    "OutboundEvent",
    "RoutePolicy",
    "RouteRef",
    "SessionRouteTarget",
    "TurnEnvelope",
    "WorkspaceStores",
    "active_entry_key_from_context",
    "active_session",
    "agent_binding",
    "apply_envelope",
    "apply_scope",
    "bind_agent",
    "build_delivery_id",
    "cli_current",
    "conversation_id",
    "current_envelope",
    "default_commands",
    "default_route_policy",
    "edit_command",
    "new_command",
    "new_session_id",
    "outbound_from_envelope",
    "parse_delivery",
    "resolve_active_session_id",
    "resolve_envelope",
    "retry_command",
    "route_policy_for_platform",
    "session_command",
    "session_route_from_delivery",
    "set_active_session",
    "set_cli_current",
    "tenant_resolver",
    "with_agent_id",
    "with_conversation",
    "with_route",
    "with_workspace",
    "workspace_dir_name",
    "workspace_key",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def all_modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in SRC.rglob("*.py"))


def imports_of(path: Path) -> set[str]:
    """Every agentsession module ``path`` imports, wherever the import statement is."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & all_modules()
            # ``from . import x`` of a submodule x imports x; anything else imports the target.
            found.update(submodules if len(submodules) == len(node.names) else {target})
    return {m for m in found if m in all_modules() and m != name}


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    return {module_name(p): frozenset(imports_of(p)) for p in SRC.rglob("*.py")}


def graph() -> dict[str, set[str]]:
    return {name: set(targets) for name, targets in _graph().items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_module_graph_has_no_cycle() -> None:
    edges = graph()
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges) or [])


def test_no_module_imports_the_package_root() -> None:
    offenders = [name for name, targets in graph().items() if PACKAGE in targets]
    assert offenders == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


CORE = {
    "agentsession.archive",
    "agentsession.children",
    "agentsession.codec",
    "agentsession.compaction",
    "agentsession.contract",
    "agentsession.copying",
    "agentsession.core",
    "agentsession.derive",
    "agentsession.errors",
    "agentsession.events",
    "agentsession.lease",
    "agentsession.listing",  # what an append changes in the catalog (pure)
    "agentsession.keys",
    "agentsession.locks",
    "agentsession.backoff",
    "agentsession.media",
    "agentsession.messages",
    "agentsession.ops",
    "agentsession.recorder",
    "agentsession.recovery",
    "agentsession.registry",
    "agentsession.retention",
    "agentsession.runstate",
    "agentsession.session",
    "agentsession.stats",
    "agentsession.storage",
    "agentsession.store",
    "agentsession.validation",
}


@pytest.mark.parametrize("core", sorted(CORE))
def test_the_core_never_imports_the_chat_layer_backends_or_the_cli(core: str) -> None:
    targets = graph()[core]
    assert not {t for t in targets if t.startswith("agentsession.chat")}, targets
    assert not {t for t in targets if t.startswith("agentsession.backends")}, targets
    assert not {t for t in targets if t.split(".")[:2] == ["agentsession", "cli"]}, targets


def test_the_command_line_asks_the_store_and_never_imports_a_backend() -> None:
    """The CLI parses and prints: what differs between backends is the store's to say (no
    backend class to check a store against), and the work is the library's."""
    cli_modules = {name for name in graph() if name.split(".")[:2] == ["agentsession", "cli"]}
    assert "agentsession.cli.sessions" in cli_modules
    for name in cli_modules:
        backends = {t for t in graph()[name] if t.startswith("agentsession.backends")}
        assert not backends, (name, backends)


def _plans_of(tree: ast.Module) -> list[ast.FunctionDef]:
    """The functions of a module that return a ``Plan`` (the I/O-free core)."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and node.returns is not None
        and ast.unparse(node.returns).startswith("Plan[")
    ]


def test_the_plans_perform_no_io() -> None:
    """The pipeline's plans only yield operations: none of them calls a storage primitive, the
    store's meta, a driver or a sleep itself (the drivers do). They live in ``core.py``; the
    sync facade's own plans (the tails of the single-event append its fast lane shares) are
    held to the same rule."""
    core_plans = _plans_of(ast.parse((SRC / "core.py").read_text(encoding="utf-8")))
    assert len(core_plans) >= 20, [p.name for p in core_plans]
    facade_plans = _plans_of(ast.parse((SRC / "session.py").read_text(encoding="utf-8")))
    forbidden = ("_storage_", "_meta_get", "_meta", "sleep", "drive", "_run", "_refresh")
    for plan in core_plans + facade_plans:
        for node in ast.walk(plan):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
                assert not any(name == f or name.startswith("_storage_") for f in forbidden), (
                    plan.name,
                    name,
                )
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("drive", "adrive", "sleep"), (plan.name, node.func.id)


def _direct_imports(path: Path) -> tuple[set[str], set[str]]:
    """What the module at ``path`` imports itself, wherever the statement is: the modules
    outside the package (top-level names: ``os``, ``msgspec``) and the package's modules; and
    the names it takes from :mod:`agentsession.ops`."""
    outside: set[str] = set()
    from_ops: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            outside.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            outside.add((node.module or "").partition(".")[0])
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == "ops":
            from_ops.update(alias.name for alias in node.names)
    outside -= {"agentsession", "__future__"}
    return outside | imports_of(path), from_ops


# What the I/O-free core imports: pure computation, the payload and storage vocabularies, the
# operations a plan yields. Neither the facade that drives it (session), nor a driver, a
# backend, the store, the recorder or the async API; no threads, files, sockets or databases.
CORE_IMPORTS = {
    "bisect",
    "datetime",
    "time",  # the clock read when a log is opened (ids made here since then are not looked up)
    "collections",
    "typing",
    "msgspec",
    "agentsession.backoff",
    "agentsession.branching",  # shifting a branch's events past its shared history (pure)
    "agentsession.codec",
    "agentsession.compaction",
    "agentsession.contract",
    "agentsession.crypto",
    "agentsession.derive",
    "agentsession.errors",
    "agentsession.events",
    "agentsession.lease",
    "agentsession.listing",  # what an append changes in the catalog (pure)
    "agentsession.messages",
    "agentsession.ops",
    "agentsession.storage",
    "agentsession.archive",  # the archive's format, read through by reads (pure)
}
NEVER_IN_THE_CORE = {
    "agentsession.session",
    "agentsession.store",
    "agentsession.recorder",
    "agentsession.keys",
    "agentsession.locks",
    "agentsession.children",  # which takes the turn lock (threads)
    "threading",
    "os",
    "fcntl",
    "asyncio",
    "socket",
    "sqlite3",
    "psycopg",
    "psycopg_pool",
}


PACKAGES = (
    "aio",
    "backends",
    "chat",
    "cli",
    "integrations",
    "interop",
    "providers",
    "testing",
    "view",
    "web",
)


def test_the_core_module_imports_no_io() -> None:
    """``agentsession.core`` imports exactly ``CORE_IMPORTS``: adding an import there means
    adding it here, and nothing of ``NEVER_IN_THE_CORE`` (nor a backend, the async API, the
    chat layer, a driver of ``ops``) may be."""
    imported, from_ops = _direct_imports(SRC / "core.py")
    assert not imported & NEVER_IN_THE_CORE, imported & NEVER_IN_THE_CORE
    assert not {
        m for m in imported if m.split(".")[:2] in (["agentsession", p] for p in PACKAGES)
    }, imported
    assert not from_ops & {"drive", "adrive"}, from_ops
    assert imported == CORE_IMPORTS, (imported - CORE_IMPORTS, CORE_IMPORTS - imported)
    # The check sees what it must: the facade's own imports fail it.
    facade, facade_ops = _direct_imports(SRC / "session.py")
    assert {"threading", "os", "agentsession.core"} <= facade and "drive" in facade_ops


def test_backends_do_not_decode_payloads() -> None:
    """Deciding what a payload means (a compaction marker, a message) is the core's: no backend
    imports the payload structs or the deriver."""
    paths = sorted((SRC / "backends").rglob("*.py"))
    assert SRC / "backends" / "jsonl" / "logfile.py" in paths  # packages are looked into
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("events")
            for alias in node.names
        }
        assert names <= {"Event", "decode_event", "decode_event_lines", "encode_event"}, (
            path.name,
            names,
        )
        assert "derive" not in {
            (node.module or "").rpartition(".")[2]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }


def test_importing_the_core_imports_no_optional_dependency() -> None:
    code = (
        "import sys, agentsession, agentsession.store, agentsession.session;"
        "s = agentsession.open_store('memory:');"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('psycopg', 'psycopg_pool', 'cryptography', 'click', 'rich', 'agentsession.chat'));"
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_the_core_surface_is_pinned() -> None:
    assert set(agentsession.__all__) == CORE_NAMES
    assert len(agentsession.__all__) <= 45


def test_the_chat_surface_is_pinned() -> None:
    assert set(agentsession.chat.__all__) == CHAT_NAMES
    for name in CHAT_NAMES:
        assert getattr(agentsession.chat, name).__doc__, name


@pytest.mark.parametrize("kind", ["dir", "sqlite"])
def test_opening_with_create_false_creates_nothing(tmp_path: Path, kind: str) -> None:
    target = str(tmp_path / "missing") if kind == "dir" else f"sqlite:///{tmp_path}/missing.db"
    with pytest.raises(agentsession.StoreUnavailable, match="no store at"):
        agentsession.open_store(target, create=False)
    assert list(tmp_path.iterdir()) == []
    agentsession.open_store(target).close()  # created by a write-mode open
    agentsession.open_store(target, create=False).close()


def test_a_registered_backend_is_opened_by_its_scheme() -> None:
    from agentsession.backends.memory import MemoryStore
    from agentsession.store import register_backend

    opened: list[str] = []

    def factory(url: str, **options: object) -> agentsession.BaseStore:
        opened.append(url)
        return MemoryStore()

    register_backend("fakebackend", factory)
    store = agentsession.open_store("fakebackend://anything")
    assert isinstance(store, MemoryStore) and opened == ["fakebackend://anything"]
    with pytest.raises(agentsession.UsageError, match="unknown store URL scheme"):
        agentsession.open_store("nosuchbackend://x")
    with pytest.raises(agentsession.UsageError):
        register_backend("x", factory)  # too short to be a scheme


# Backends implement the storage contract by composition (agentsession.storage.LogStorage):
# no backend class subclasses the library's session.


def _session_subclasses() -> set[str]:
    found = set()
    for path in sorted((SRC / "backends").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).endswith("BaseSession") for base in node.bases
            ):
                found.add(f"{path.relative_to(SRC).as_posix()}:{node.name}")
    return found


def test_backends_compose_the_session_instead_of_subclassing_it() -> None:
    assert _session_subclasses() == set()


# What a backend module may reach of another object: nothing ``_``-prefixed but its own
# (``self._x``, ``cls._x``), dunder names and namedtuple's public-by-convention methods.
_NAMEDTUPLE_METHODS = {"_replace", "_asdict", "_fields", "_make"}

def _reaches(tree: ast.AST) -> set[str]:
    """The ``_``-prefixed attributes of other objects that ``tree`` reads or calls."""
    return {
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and node.attr not in _NAMEDTUPLE_METHODS
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    }


def test_no_backend_reaches_into_another_object() -> None:
    """A backend module touches no ``_``-prefixed attribute but its own objects' (``self``,
    ``cls``): not the session's, not another backend object's (the native async path uses the
    PostgreSQL log's and connections' public methods), not its base store's."""
    found = set()
    for path in sorted((SRC / "backends").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found |= {f"{path.relative_to(SRC).as_posix()}:{reach}" for reach in _reaches(tree)}
    assert found == set()


def test_the_reach_check_sees_what_it_must() -> None:
    """The check flags a reach into another object, and lets pass what it must."""
    tree = ast.parse(
        "def f(self, session, parts):\n"
        "    session._store\n"
        "    self._db._sql\n"
        "    super()._exists('x')\n"
        "    self._own\n"
        "    cls._own\n"
        "    parts._replace(query='')\n"
        "    session.__class__\n"
    )
    assert _reaches(tree) == {"session._store", "self._db._sql", "super()._exists"}


# The store side is composed too (agentsession.catalog): a backend hands BaseStore its parts
# (a catalog, meta, a locker). Its named store class derives from BaseStore only to keep its
# name (isinstance, constructors, public attributes): a facade whose __init__ builds the parts
# and whose other members are the backend's own public API, overriding nothing of BaseStore
# and keeping no private method (what a backend does lives in its parts).

_CLASS_BOOKKEEPING = {
    "__annotations__",
    "__dict__",
    "__doc__",
    "__firstlineno__",
    "__module__",
    "__qualname__",
    "__static_attributes__",
    "__weakref__",
    "__annotate_func__",
    "__annotations_cache__",
}


def _backend_store_classes() -> list[type]:
    import importlib
    import inspect

    found: dict[str, type] = {}
    for path in sorted((SRC / "backends").rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if (
                inspect.isclass(cls)
                and cls.__module__ == module.__name__
                and issubclass(cls, agentsession.BaseStore)
            ):
                found[cls.__qualname__] = cls
    return [found[name] for name in sorted(found)]


def test_backend_store_classes_are_facades_that_override_nothing() -> None:
    pytest.importorskip("psycopg")
    classes = _backend_store_classes()
    assert {c.__name__ for c in classes} >= {
        "JsonlFileStore",
        "JsonlStore",
        "MemoryStore",
        "PostgresStore",
        "SqliteStore",
        "StaticStore",
    }
    base = agentsession.BaseStore
    privates = set()
    for cls in classes:
        for name in vars(cls):
            if name in _CLASS_BOOKKEEPING or name in ("__init__", "capabilities"):
                continue  # capabilities: the class's declaration of what its I/O costs
            assert not hasattr(base, name), f"{cls.__name__} overrides BaseStore.{name}"
            if name.startswith("_") and callable(getattr(cls, name)):
                privates.add(f"{cls.__name__}.{name}")
    assert privates == set()


def _hooks_of(cls: ast.ClassDef) -> list[str]:
    """Methods of a class that only say what a subclass must do: a body (after its docstring)
    that is empty, ``pass``, ``...`` or raises NotImplementedError."""
    hooks = []
    for node in cls.body:
        if not isinstance(node, ast.FunctionDef) or any(
            ast.unparse(d) in ("overload", "typing.overload") for d in node.decorator_list
        ):
            continue  # an overload's body is its signature's
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        trivial = all(
            isinstance(s, ast.Pass)
            or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
            for s in body
        )
        raises = any(
            isinstance(s, ast.Raise) and "NotImplementedError" in ast.unparse(s)
            for s in ast.walk(node)
        )
        if trivial or raises:
            hooks.append(node.name)
    return hooks


def test_the_store_base_has_no_hooks_for_a_backend_to_override() -> None:
    tree = ast.parse((SRC / "store.py").read_text(encoding="utf-8"))
    (base,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BaseStore"]
    assert _hooks_of(base) == []
    # The check itself finds a hook.
    sample = ast.parse(
        "class S:\n"
        "    def _x(self):\n        '''doc'''\n"
        "    def _y(self):\n        raise NotImplementedError\n"
        "    def z(self):\n        return 1\n"
    )
    assert isinstance(sample.body[0], ast.ClassDef)
    assert _hooks_of(sample.body[0]) == ["_x", "_y"]
