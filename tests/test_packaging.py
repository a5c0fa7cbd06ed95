"""What a user installs: one version, the licence in every artefact, the command line behind the
``cli`` extra, an import that works without ``fcntl``, and reprs that never show a payload or a
secret.

Subprocesses run with ``subprocess.run(..., timeout=...)``, which kills a child that overruns,
so every process a test starts has ended when the test does.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from collections.abc import Iterator
from email.message import Message as EmailMessage
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest

import agentsession
from agentsession import _cli_entry

from .test_conformance_postgres import DSN, SKIP_REASON, drop_schemas, new_schema_name
from .test_conformance_postgres import url_with_schema as _url_with_schema

ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cret-Sentinel-4217"
"""Put in every payload field and password of the objects whose reprs are checked."""


def pyproject() -> dict[str, Any]:
    """pyproject.toml, parsed (tomllib is in the standard library from Python 3.11)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs tomli on 3.10")
    parsed: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return parsed


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this environment, in the project's directory
    (killed after 120 s)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
        check=False,
    )


# -- one version ------------------------------------------------------------------------------


def test_the_version_has_one_source_and_the_installed_metadata_agrees() -> None:
    config = pyproject()
    project = config["project"]
    assert "version" not in project, "the version is dynamic: __version__ is its one source"
    assert "version" in project["dynamic"]
    assert config["tool"]["hatch"]["version"]["path"] == "src/agentsession/__init__.py"
    installed = importlib.metadata.version("agentsession")
    assert installed == agentsession.__version__, (
        "the installed metadata is stale: reinstall (pip install -e '.[dev,cli,postgres]')"
    )


def test_the_changelog_has_an_unreleased_section_and_an_entry_for_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n")
    assert "\n## [Unreleased]\n" in text
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, flags=re.M)
    assert released, "no released version in CHANGELOG.md"
    for _, day in released:
        dt.date.fromisoformat(day)
    assert agentsession.__version__ in {version for version, _ in released}
    assert text.index("## [Unreleased]") < text.index(f"## [{released[0][0]}]")


def test_the_licence_is_mit_and_names_its_holders() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 agentsession developers" in text
    project = pyproject()["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]


# -- the built artefacts ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel and the sdist, built from this tree by hatchling (no network, no pip)."""
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling is not installed (it comes with the dev extra)")
    out = tmp_path_factory.mktemp("dist")
    code = f"""
        import json, hatchling.build as backend
        out = {str(out)!r}
        print(json.dumps({{"wheel": backend.build_wheel(out), "sdist": backend.build_sdist(out)}}))
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    names = json.loads(result.stdout.strip().splitlines()[-1])
    return {kind: out / name for kind, name in names.items()}


def wheel_metadata(wheel: Path) -> tuple[EmailMessage, list[str], str]:
    """The wheel's METADATA, its file names and its entry_points.txt."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode("utf-8"))
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode("utf-8")
    return metadata, names, entry_points


def test_the_wheel_carries_the_licence_the_version_and_the_classifiers(
    built: dict[str, Path],
) -> None:
    metadata, names, _ = wheel_metadata(built["wheel"])
    assert metadata["Name"] == "agentsession"
    assert metadata["Version"] == agentsession.__version__
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert "agentsession/py.typed" in names
    classifiers = set(metadata.get_all("Classifier") or [])
    for minor in (10, 11, 12, 13):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert {
        "Development Status :: 3 - Alpha",
        "Typing :: Typed",
        "Operating System :: POSIX",
    } <= classifiers
    # PEP 639: the SPDX expression replaces licence classifiers, and PyPI refuses both at once.
    assert not [c for c in classifiers if c.startswith("License ::")]


def test_the_library_installs_without_the_command_lines_dependencies(
    built: dict[str, Path],
) -> None:
    metadata, _, entry_points = wheel_metadata(built["wheel"])
    requires = metadata.get_all("Requires-Dist") or []
    unconditional = [r for r in requires if "extra ==" not in r]
    assert [re.split(r"[<>=!~ \[;]", r)[0] for r in unconditional] == ["msgspec"]
    for name in ("click", "rich"):
        extras = {
            re.sub(r".*extra == ['\"](\w+)['\"].*", r"\1", r)
            for r in requires
            if re.match(rf"{name}\b", r)
        }
        assert extras == {"cli", "dev"}, (name, extras)  # dev names the cli extra
    assert {"cli", "dev", "otel", "postgres"} <= set(metadata.get_all("Provides-Extra") or [])
    assert "agentsession = agentsession._cli_entry:main" in entry_points


def test_the_sdist_carries_the_licence_changelog_and_tests(built: dict[str, Path]) -> None:
    with tarfile.open(built["sdist"]) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {
        "LICENSE",
        "CHANGELOG.md",
        "README.md",
        "pyproject.toml",
        "src/agentsession/__init__.py",
        "src/agentsession/py.typed",
        "tests/test_packaging.py",
    } <= names
    assert not [n for n in names if n.startswith(".venv/")]


# -- the command line is an extra -------------------------------------------------------------

HINT = "the command line needs: pip install 'agentsession[cli]'"


@pytest.mark.parametrize("missing", ["click", "rich"])
def test_without_the_cli_extra_the_library_imports_and_the_command_says_what_to_install(
    missing: str,
) -> None:
    code = f"""
        import sys
        sys.modules[{missing!r}] = None  # as if the cli extra were not installed
        import agentsession
        store = agentsession.open_store("memory:")
        store.get("s").append(agentsession.Event.new("user/message",
                                                     agentsession.Message.user("hi")))
        print("library ok", len(store.get("s").read()))
        from agentsession._cli_entry import main
        main(["ls"])
        print("not reached")
    """
    result = run_python(code)
    assert result.returncode == 1
    assert result.stdout.strip() == "library ok 1"
    assert result.stderr.strip() == f"agentsession: {HINT} (missing: {missing})"
    assert "Traceback" not in result.stderr


def test_python_m_agentsession_without_click_prints_one_line_and_exits_1() -> None:
    code = """
        import runpy, sys
        sys.modules["click"] = None
        runpy.run_module("agentsession", run_name="__main__")
    """
    result = run_python(code)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"agentsession: {HINT} (missing: click)"]


def test_the_installed_command_without_click_prints_one_line_and_exits_1(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "agentsession"
    if not script.exists():
        pytest.skip("the agentsession console script is not installed in this environment")
    shadow = tmp_path / "click"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('click is not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [str(script), "ls"], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert result.returncode == 1
    assert result.stderr.strip() == f"agentsession: {HINT} (missing: click)"


def test_with_the_cli_extra_the_entry_point_runs_the_command_line() -> None:
    assert _cli_entry.missing_cli_modules() == []
    result = subprocess.run(
        [sys.executable, "-m", "agentsession", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert agentsession.__version__ in result.stdout


# -- no fcntl (Windows) -----------------------------------------------------------------------

NO_FCNTL = """
    import sys
    sys.modules["fcntl"] = None     # Windows has neither
    sys.modules["resource"] = None
    import platform
    import agentsession as ags
    from agentsession import Event, Message, ToolCall, events
"""


def test_without_fcntl_the_package_imports_and_memory_and_sqlite_stores_work(
    tmp_path: Path,
) -> None:
    code = (
        NO_FCNTL
        + f"""
    tmp = {str(tmp_path)!r}
    memory = ags.open_store("memory:")
    with memory.lock("m", timeout=1):
        assert memory.is_locked("m")
    print("memory lock ok")

    sqlite = ags.open_store(f"sqlite:///{{tmp}}/s.db")
    session = sqlite.get("s")
    session.append(Event.new("user/message", Message.user("hello")))
    assert [m.role for m in session.messages()] == ["user"]
    assert sqlite.recover() == []            # nothing crashed: no lock is needed
    print("sqlite ok")
    for attempt in (lambda: sqlite.lock("s", timeout=0), lambda: sqlite.is_locked("s")):
        try:
            attempt()
        except ags.StoreUnavailable as exc:
            assert "fcntl" in str(exc) and platform.system() in str(exc), exc
        else:
            raise AssertionError("a file turn lock without fcntl")
    print("sqlite locks refused")
    session.append_many([
        Event.new("turn/start", events.TurnStart(), agent="a"),
        Event.new("assistant/message", Message.assistant(tool_calls=[ToolCall("c1", "x")]),
                  agent="a"),
    ])
    [report] = sqlite.recover()
    assert report.status == "damaged" and "fcntl" in report.error, report
    print("sqlite recovery reports damaged")

    try:
        ags.open_store(f"{{tmp}}/jsonl")
    except ags.StoreUnavailable as exc:
        assert "fcntl" in str(exc), exc
        print("jsonl refused")
    """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "memory lock ok",
        "sqlite ok",
        "sqlite locks refused",
        "sqlite recovery reports damaged",
        "jsonl refused",
    ]


def test_without_fcntl_the_command_line_works_on_a_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    with agentsession.open_store(url) as store:
        store.get("conv-1").append(
            agentsession.Event.new("user/message", agentsession.Message.user("hi"))
        )
    code = (
        NO_FCNTL
        + f"""
    from agentsession._cli_entry import main
    main(["--store", {url!r}, "ls"])
    """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "conv-1" in result.stdout


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason=SKIP_REASON)
def test_without_fcntl_a_postgresql_store_works_with_its_turn_locks() -> None:
    schema = new_schema_name()
    code = (
        NO_FCNTL
        + f"""
    store = ags.open_store({_url_with_schema(schema)!r}, pool_max_size=2)
    session = store.get("p")
    session.append(Event.new("user/message", Message.user("hello")))
    with store.lock("p", timeout=5):
        assert store.is_locked("p")
    assert [m.role for m in session.messages()] == ["user"]
    store.close()
    print("postgresql ok")
    """
    )
    try:
        result = run_python(code)
    finally:
        drop_schemas([schema])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "postgresql ok"


def test_importing_the_package_does_not_import_fcntl() -> None:
    result = run_python(
        """
        import sys
        import agentsession, agentsession.locks, agentsession.store, agentsession.session
        agentsession.open_store("memory:").lock("m", timeout=1).release()
        print("fcntl" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# -- reprs ------------------------------------------------------------------------------------


def assert_clean(text: str) -> None:
    assert SECRET not in text, text


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[agentsession.BaseStore]:
    """A JSONL store with one session holding the sentinel in every payload field."""
    store = agentsession.open_store(str(tmp_path / "store"))
    try:
        yield store
    finally:
        store.close()


def record_secret_turn(store: agentsession.BaseStore) -> dict[str, Any]:
    """A turn (left open, as a crash would) whose payloads all contain :data:`SECRET`; returns
    the handles seen while recording, for their reprs."""
    session = store.get("conv")
    seen: dict[str, Any] = {"session": session, "store": store}
    with store.lock("conv", timeout=5) as lock:
        seen["lock"] = lock
        with session.turn(agent="coder", user="U1", metadata={"token": SECRET}) as turn:
            seen["turn"] = turn
            turn.user(f"my password is {SECRET}")
            with turn.step() as step:
                seen["step"] = step
                call = agentsession.ToolCall(id="c1", name="login", arguments={"pw": SECRET})
                step.assistant(f"trying {SECRET}", tool_calls=[call])
                step.tool_result("c1", "login", f"ok {SECRET}")
            turn.assistant(f"done {SECRET}")
    session.append_many(
        [
            agentsession.Event.new(
                "turn/start", agentsession.events.TurnStart(), agent="coder", meta={"k": SECRET}
            ),
            agentsession.Event.new(
                "assistant/message",
                agentsession.Message.assistant(
                    tool_calls=[agentsession.ToolCall("c2", "deploy", {"key": SECRET})]
                ),
                agent="coder",
            ),
        ]
    )
    return seen


def test_handles_never_show_a_payload_or_a_secret(recorded: agentsession.BaseStore) -> None:
    seen = record_secret_turn(recorded)
    for name, value in seen.items():
        assert SECRET not in repr(value), (name, repr(value))
    assert_clean(repr(recorded.list()))
    [report] = recorded.recover(dry_run=True)
    assert report.status == "pending"
    assert_clean(repr(report.turns[0]))  # a RecoveryReport
    assert_clean(repr(report))  # a StoreRecoveryReport (without its IncompleteTurns)
    assert_clean(repr(agentsession.load_run_state(seen["session"]).usage))
    with agentsession.open_store("memory:") as copy:
        assert_clean(repr(agentsession.copy_store(recorded, copy)))  # a CopyReport
    with recorded.lock(SECRET, timeout=5) as lease:  # a Lease: no holder token, no payload
        assert re.fullmatch(r"<Lease '.*' epoch \d+ taken>", repr(lease)), repr(lease)
        assert lease._record.holder not in repr(lease)


def test_memory_and_sqlite_store_reprs_name_only_their_location(tmp_path: Path) -> None:
    for target in ("memory:", f"sqlite:///{tmp_path}/x.db", str(tmp_path / "dir")):
        with agentsession.open_store(target) as store:
            session = store.get("s")
            session.append(
                agentsession.Event.new("user/message", agentsession.Message.user(SECRET))
            )
            for value in (store, session):
                assert_clean(repr(value))
                assert re.fullmatch(r"<\w+ .+>", repr(value)), repr(value)


def test_errors_show_no_payload() -> None:
    store = agentsession.open_store("memory:")
    session = store.get("s")
    session.append(agentsession.Event.new("user/message", agentsession.Message.user(SECRET)))
    with pytest.raises(agentsession.ConflictError) as conflict:
        session.append_many(
            [agentsession.Event.new("user/message", agentsession.Message.user(SECRET))],
            expect_seq=0,
        )
    with pytest.raises(agentsession.DuplicateSession) as duplicate:
        store.create(
            "s", [agentsession.Event.new("user/message", agentsession.Message.user(SECRET))]
        )
    with pytest.raises(agentsession.SessionNotFound) as missing:
        store.open("nobody")
    for info in (conflict, duplicate, missing):
        assert_clean(repr(info.value))
        assert_clean(str(info.value))


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason=SKIP_REASON)
def test_postgresql_reprs_and_errors_never_show_the_password() -> None:
    schema = new_schema_name()
    url = with_password(_url_with_schema(schema), SECRET)
    try:
        with agentsession.open_store(url, pool_max_size=2) as store:
            assert SECRET in store.url  # what reopens the store keeps it, on purpose
            session = store.get("conv")
            session.append(agentsession.Event.new("user/message", agentsession.Message.user("hi")))
            with store.lock("conv", timeout=5) as lock:
                for value in (store, session, lock, store.list()):
                    assert_clean(repr(value))
            assert_clean(store.location)
            assert_clean(session.location)
    finally:
        drop_schemas([schema])
    unreachable = with_password("postgresql://postgres@127.0.0.1:1/test", SECRET)
    with pytest.raises(agentsession.StoreUnavailable) as failed:
        agentsession.open_store(unreachable, connect_timeout=5)
    seen: BaseException | None = failed.value
    while seen is not None:
        assert_clean(repr(seen))
        assert_clean(str(seen))
        seen = seen.__cause__ or seen.__context__


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in its user info (the test server trusts, and ignores it)."""
    scheme, rest = url.split("://", 1)
    userinfo, _, host = rest.rpartition("@")
    user = (userinfo or "postgres").split(":")[0]
    return f"{scheme}://{user}:{password}@{host}"


# Value types (messages, parts, events, run state) print their fields, payload included: a
# debugging aid for what is the caller's own data. They hold no store secret (no key, no
# passphrase, no password), which is what these tests pin for the handles and the errors.
VALUE_TYPES = {
    "TextPart",
    "ThinkingPart",
    "ImagePart",
    "FilePart",
    "AttachmentRef",
    "ToolCall",
    "ToolResult",
    "Message",
    "Event",
    "RunState",
    "IncompleteTurn",
}


def test_every_public_class_is_covered_by_a_repr_check() -> None:
    checked_elsewhere = {
        # handles and reports: test_handles_never_show_a_payload_or_a_secret and the store tests
        "BaseSession",
        "BaseStore",
        "Turn",
        "Step",
        "TurnLock",
        "Lease",
        "RecoveryReport",
        "StoreRecoveryReport",
        "SessionInfo",
        "CopyReport",
        # protocols, never instantiated
        "Session",
        "Store",
        # a type alias of the parts
        "Part",
    }
    errors = {
        name
        for name in agentsession.__all__
        if isinstance(getattr(agentsession, name), type)
        and issubclass(getattr(agentsession, name), agentsession.SessionError)
    }
    classes = {
        name
        for name in agentsession.__all__
        if isinstance(getattr(agentsession, name), type) or name == "Part"
    }
    assert classes == checked_elsewhere | errors | VALUE_TYPES
