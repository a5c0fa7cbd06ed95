"""``agentsession demo``: a scripted agent, a crash, a recovery and a compaction, offline.

A fake model decides tool calls from the conversation the way a real one would, and a small
agent loop records everything through ``session.turn()``. Three conversations run on a JSONL
store, one of them with a subagent that works in a child session and merges its summary back;
one runs in a child process that is SIGKILLed in the middle of a tool call. The demo
then restarts, lets ``store.recover()`` repair the interrupted turn, shows that the history a
model would see carries the interrupted tool result, compacts the long conversation and prints
the commands to explore what it wrote.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
from rich.console import Console
from rich.markup import escape

from .derive import INTERRUPTED_TOOL_RESULT_TEXT
from .errors import SessionBusy, StorageError, UsageError
from .messages import Message, ToolCall
from .session import BaseSession
from .store import BaseStore, open_store

__all__ = ["DemoResult", "ScriptedModel", "command_prefix", "run_demo", "run_turn"]

MARKER = ".agentsession-demo"
AGENT = "demo-coder"
LONG = "slack:C001:t:1712345678.9"
SHORT = "cli:demo"
CRASHED = "slack:C002"
CHILD = "cli:demo:child:researcher"
DOUBLE = "slack:C003:t:1712350000.1"
Tool = Callable[..., str]


class ScriptedModel:
    """A stand-in for an LLM: reads the conversation and decides the next message."""

    def __init__(self) -> None:
        self._calls = 0

    def _call(self, text: str, name: str, **arguments: str) -> Message:
        self._calls += 1
        call = ToolCall(f"call_{self._calls:03d}", name, dict(arguments))
        return Message.assistant(text, tool_calls=[call])

    def respond(self, history: list[Message]) -> Message:
        """The assistant message a model would return for ``history``."""
        last = history[-1]
        if last.role == "tool":
            result = last.tool_results[-1]
            if result.audit.get("decision") == "interrupted":
                return Message.assistant(f"The {result.name} call was interrupted.")
            if result.name == "run_tests" and "failed" in result.content:
                path = re.search(r"\((\S+\.py)", result.content)
                return self._call(
                    "One test fails; reading the code it names.",
                    "read_file",
                    path=path.group(1) if path else "src/app.py",
                )
            answers = {
                "run_tests": "All 42 tests pass now.",
                "read_file": "parse() splits on every comma, so quoted fields break.",
                "search_docs": "The docs say csv.reader handles quoted fields.",
                "write_file": "Rewrote src/parse.py to use csv.reader.",
                "slow_deploy": "Deployed to production.",
            }
            return Message.assistant(answers.get(result.name, result.content))
        question = last.text.lower()
        if "deploy" in question:
            interrupted = any(
                r.audit.get("decision") == "interrupted" for m in history for r in m.tool_results
            )
            text = "The last deploy was interrupted; running it again." if interrupted else ""
            return self._call(text, "slow_deploy", target="production")
        if "fix" in question:
            return self._call(
                "",
                "write_file",
                path="src/parse.py",
                content="import csv\n\ndef parse(text):\n    return next(csv.reader([text]))\n",
            )
        if "test" in question:
            return self._call("", "run_tests")
        if "read" in question:
            path = re.search(r"(\S+\.py)", last.text)
            return self._call("", "read_file", path=path.group(1) if path else "README.md")
        if "docs" in question:
            return self._call("", "search_docs", query=last.text)
        return Message.assistant(
            "I can read and write files, run the tests, search the docs and deploy."
        )


def _tools(crash_signal: Callable[[], None] | None = None) -> dict[str, Tool]:
    state = {"fixed": False}

    def read_file(path: str) -> str:
        return f"# {path}\ndef parse(text):\n    return text.split(',')"

    def write_file(path: str, content: str) -> str:
        state["fixed"] = True
        return f"wrote {len(content)} bytes to {path}"

    def run_tests() -> str:
        if state["fixed"]:
            return "42 passed"
        return "1 failed, 41 passed: test_parse_quoted (src/parse.py:3: quoted commas are split)"

    def search_docs(query: str) -> str:
        return "csv.reader handles quoted fields; see https://docs.python.org/3/library/csv.html"

    def slow_deploy(target: str) -> str:
        if crash_signal is not None:
            crash_signal()
            time.sleep(60)  # the demo kills the process here
        return f"deployed to {target}"

    return {
        "read_file": read_file,
        "write_file": write_file,
        "run_tests": run_tests,
        "search_docs": search_docs,
        "slow_deploy": slow_deploy,
    }


def run_turn(
    store: BaseStore,
    session_id: str,
    text: str,
    model: ScriptedModel,
    tools: dict[str, Tool],
    agent: str = AGENT,
) -> BaseSession:
    """One turn of ``agent``'s loop: record the user message, then let the model call tools
    until it answers in plain text (at most 6 steps), under the conversation's turn lock."""
    session = store.get(session_id)
    with store.lock(session_id, timeout=10), session.turn(agent=agent, user="U-demo") as turn:
        turn.user(text)
        for _ in range(6):
            history = session.messages(agent=agent)
            reply = model.respond(history)
            with turn.step() as step:
                step.assistant(reply)
                prompt = sum(len(m.text) + 40 * len(m.tool_results) for m in history)
                step.usage(input_tokens=prompt // 4 + 120, output_tokens=len(reply.text) // 4 + 12)
                for call in reply.tool_calls:
                    step.tool_call(call)
                    step.tool_result(call.id, call.name, tools[call.name](**call.arguments))
            if not reply.tool_calls:
                break
    return session


def _check_target(root: Path) -> None:
    """Refuse a target the demo may not replace: not a directory, or a non-empty directory
    that an earlier demo did not make."""
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} exists and is not a directory")
    try:
        if root.exists() and any(root.iterdir()) and not (root / MARKER).exists():
            raise UsageError(
                f"{root} is not empty and was not made by the demo; choose another directory"
            )
    except OSError as exc:
        raise StorageError(f"cannot read the demo directory {root}: {exc}") from exc


def _new_build_directory(root: Path) -> Path:
    """An empty, owner-only directory beside ``root`` where the demo builds its store."""
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=f".{root.name}.building-", dir=root.parent))
        (build / MARKER).write_text("made by `agentsession demo`; safe to delete\n")
    except OSError as exc:
        raise StorageError(f"cannot prepare the demo directory beside {root}: {exc}") from exc
    return build


class _LastTime(msgspec.Struct):
    time: str | None = None


def _stamp_modification_times(build: Path) -> None:
    """Give each session log the modification time of its last event (microseconds), so that
    ``ls`` lists the demo's sessions in the order they were last written on every run: the
    kernel stamps files from a coarse clock, and logs written within one tick would tie (and
    list by id)."""
    for path in build.glob("*.jsonl"):
        lines = path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)
        stamp = msgspec.json.decode(lines[-1], type=_LastTime).time
        if stamp is None:
            continue
        when = msgspec.convert(stamp, dt.datetime)
        ns = int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000
        os.utime(path, ns=(ns, ns))


def _move_into_place(build: Path, root: Path) -> None:
    """Replace ``root`` (absent, empty or an earlier demo's) by the finished ``build``."""
    _check_target(root)
    try:
        if root.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{root.name}.old-", dir=root.parent))
            os.rename(root, old / "store")
            os.rename(build, root)
            shutil.rmtree(old)
        else:
            os.rename(build, root)
    except OSError as exc:
        raise StorageError(f"cannot move the demo store into {root}: {exc}") from exc


def command_prefix(
    *,
    which: Callable[[str], str | None] = shutil.which,
    scripts: str | None = None,
    executable: str | None = None,
    cwd: str | None = None,
) -> str:
    """How to run ``agentsession`` from a shell in ``cwd``, for the commands the demo
    suggests: ``agentsession`` when that is this installation's script on PATH; the script's
    path (``.venv/bin/agentsession``) when its directory is not on PATH; otherwise
    ``python -m agentsession`` with this interpreter. The arguments default to this process's
    (``sysconfig``'s scripts directory, ``sys.executable``, the working directory)."""
    scripts = scripts if scripts is not None else sysconfig.get_path("scripts")
    executable = executable if executable is not None else sys.executable
    cwd = cwd if cwd is not None else os.getcwd()

    def shown(path: str) -> str:
        relative = os.path.relpath(path, cwd)
        if relative.startswith(os.pardir) or os.path.isabs(relative):
            return shlex.quote(path)
        return shlex.quote(relative if os.sep in relative else os.path.join(os.curdir, relative))

    script = os.path.join(scripts, "agentsession")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        found = which("agentsession")
        if found and os.path.realpath(found) == os.path.realpath(script):
            return "agentsession"
        return shown(script)
    name = os.path.basename(executable)
    found = which(name)
    python = name if found and os.path.realpath(found) == os.path.realpath(executable) else None
    return f"{python or shown(executable)} -m agentsession"


def _child(directory: str) -> None:
    """The crashing conversation, run in its own process (the parent kills it mid-tool)."""
    store = open_store(directory)

    def crash_signal() -> None:
        print("tool running", flush=True)

    run_turn(
        store, CRASHED, "Deploy the build to production", ScriptedModel(), _tools(crash_signal)
    )


def _run_crashing_child(directory: Path) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsession.demo", "--child", str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "tool running":
            err = proc.stderr.read() if proc.stderr else ""
            raise UsageError(f"the demo's child process failed: {line}{err}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        return proc.pid
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


class DemoResult(msgspec.Struct, frozen=True):
    """What :func:`run_demo` wrote."""

    location: str
    """The store's directory (absolute)."""
    sessions: dict[str, int]
    """Each session's id and number of events."""
    commands: list[str]
    """The commands it suggests to explore the store."""


def _double_texting(store: BaseStore) -> list[str]:
    """Scene 7: messages delivered to the conversation's inbox (no lock) while a worker holding
    its lease answers the first: a second one is queued, the platform's retry of it is stored
    once, and one sent with ``policy="reject"`` is refused; the worker then answers the queued
    one in a turn of its own. Returns what to print."""
    lines = []
    first = store.deliver(DOUBLE, "Deploy staging", id="Ev100", user="U1")
    lines.append(f"delivered {first.id}: {escape(first.message.text)!r} (no lock needed)")
    session = store.get(DOUBLE)
    with store.lock(DOUBLE, timeout=5) as lease:
        for delivery in session.pending(lease):
            with delivery.start_turn(agent=AGENT) as turn:
                if delivery.id == first.id:
                    queued = store.deliver(DOUBLE, "and production too", id="Ev101", user="U1")
                    retry = store.deliver(DOUBLE, "and production too", id="Ev101", user="U1")
                    lines.append(
                        f"while the agent answers, {queued.id} is queued; the platform's retry "
                        f"of it is the same delivery (seq {retry.seq} = {queued.seq})"
                    )
                    try:
                        store.deliver(DOUBLE, "never mind", id="Ev102", policy="reject")
                    except SessionBusy:
                        lines.append("Ev102, sent with policy=reject, is refused: a turn runs")
                answer = f"Done: {delivery.message.text.lower()}."
                turn.assistant(answer)
            lines.append(f"turn for {delivery.id}: assistant: {escape(answer)}")
    history = [m.text for m in session.messages(agent=AGENT)]
    lines.append(f"the history, in order: {escape(' / '.join(history))}")
    return lines


def run_demo(directory: str | os.PathLike[str], console: Console | None = None) -> DemoResult:
    """Run the whole demo and leave its store in ``directory`` (created, or replaced when an
    earlier demo made it).

    The store is built in a new directory beside ``directory`` and renamed into place only
    when it is complete: a demo that stops half-way (an error, Ctrl-C, its output closed)
    removes what it built and leaves ``directory`` as it was."""
    console = console or Console(highlight=False, soft_wrap=True, emoji=False)
    root = Path(directory)
    _check_target(root)
    build = _new_build_directory(root)
    try:
        result = _run(root, build, str(directory), console)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return result


def _run(root: Path, build: Path, directory: str, console: Console) -> DemoResult:
    started = time.perf_counter()
    model = ScriptedModel()
    tools = _tools()
    shown = escape(directory)
    say = console.print

    def where(session: BaseSession) -> str:
        """Where the session's file will be once the store is in place."""
        return escape(os.path.join(directory, os.path.basename(session.location)))

    say(f"[bold]agentsession demo[/] · a scripted agent on the JSONL store in [cyan]{shown}[/]\n")
    store = open_store(build)
    try:
        say("[bold]1.[/] A coding conversation in a Slack thread, five turns:")
        for question in [
            "Why does the test suite fail?",
            "Read src/parse.py",
            "Search the docs for quoted fields",
            "Fix parse.py with csv.reader",
            "Run the tests again",
        ]:
            session = run_turn(store, LONG, question, model, tools)
            answer = session.messages(agent=AGENT)[-1].text
            say(f"   user: {question}  →  assistant: {escape(answer)}")
        long_events = store.get(LONG).latest_seq
        say(f"   {long_events} events recorded in {where(store.get(LONG))}\n")

        say("[bold]2.[/] A short command-line conversation:")
        session = run_turn(store, SHORT, "What can you do?", model, tools)
        say(f"   assistant: {escape(session.messages()[-1].text)}\n")

        say("[bold]3.[/] A subagent researches in a child session and merges a summary back:")
        lead = store.get(SHORT)
        child = lead.fork(
            "researcher", inherit=2, task="how to parse quoted CSV fields", child_id=CHILD
        )
        inherited = len(child.messages())
        run_turn(store, CHILD, "Search the docs for quoted fields", model, tools, "researcher")
        finding = store.get(CHILD).messages()[-1].text
        child.merge(f"Research: {finding}")
        merged = lead.messages()[-1]
        say(
            f"   {escape(CHILD)} inherited {inherited} messages, ran search_docs and merged; "
            f"{SHORT} now ends with {escape(merged.author)}'s summary: "
            f"{escape(merged.text)}\n"
        )

        say("[bold]4.[/] A deploy in another process, killed in the middle of a tool call:")
        pid = _run_crashing_child(build)
        crashed = store.get(CRASHED)
        say(
            f"   child process {pid} started tool slow_deploy and was SIGKILLed; its turn has "
            f"no end ({crashed.latest_seq} events on disk)\n"
        )
    finally:
        store.close()

    say("[bold]5.[/] Restart: a fresh store runs recovery before any new turn:")
    store = open_store(build)
    try:
        recovery_log = logging.getLogger("agentsession.recovery")
        level = recovery_log.level
        recovery_log.setLevel(logging.ERROR)  # the demo reports the repair itself, below
        try:
            reports = store.recover()
        finally:
            recovery_log.setLevel(level)
        for report in reports:
            turns = [t for t in report.turns if t.repaired]
            results = sum(t.orphan_results for t in turns)
            say(
                f"   {escape(report.session_id)}: {report.status}, {len(turns)} turn repaired, "
                f"{results} tool call answered as interrupted"
            )
        history = store.get(CRASHED).messages(agent=AGENT)
        interrupted = next(r for m in history for r in m.tool_results)
        assert interrupted.content == INTERRUPTED_TOOL_RESULT_TEXT
        say(f'   the model now sees for {interrupted.name}: "{escape(interrupted.content)}"')
        session = run_turn(store, CRASHED, "Is the deploy done?", model, tools)
        replies = [m.text for m in session.messages(agent=AGENT)[-3:] if m.role == "assistant"]
        say(f"   next turn, assistant: {escape(' / '.join(r for r in replies if r))}\n")

        say("[bold]6.[/] Compaction of the long conversation, keeping the last two turns:")
        long_session = store.get(LONG)
        before = len(long_session.messages(agent=AGENT))
        long_session.compact(
            "Summary: the tests failed on quoted commas in src/parse.py; the docs point to "
            "csv.reader, which the assistant proposed using.",
            keep_turns=2,
        )
        after = len(long_session.messages(agent=AGENT))
        say(
            f"   {before} messages → {after} (summary + the last two turns); all "
            f"{long_session.latest_seq} events stay on disk\n"
        )
        say("[bold]7.[/] Double texting: the user writes again while the agent answers:")
        for line in _double_texting(store):
            say(f"   {line}")
        say("")
        sessions = {info.id: info.last_seq for info in store.list()}
    finally:
        store.close()

    _stamp_modification_times(build)
    _move_into_place(build, root)
    prefix = f"{command_prefix()} --store {shlex.quote(directory)}"
    commands = [
        f"{prefix} {command}"
        for command in [
            "ls --tree",
            f"show {CHILD}",
            f"show {CRASHED}",
            f"show {shlex.quote(LONG)}",
            f"messages {CRASHED} --agent {AGENT}",
            "stats",
        ]
    ]
    elapsed = time.perf_counter() - started
    say(f"Finished in {elapsed:.1f} s. Explore what the demo wrote:")
    for command in commands:
        say(f"   [green]{escape(command)}[/]")
    return DemoResult(location=str(root.resolve()), sessions=sessions, commands=commands)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        run_demo(sys.argv[1] if len(sys.argv) > 1 else "./agentsession-demo")
