"""What every reliability scenario shares: its configuration, its result row, and the checks
that decide whether a session came through a fault intact.

A scenario is a module in ``reliability/scenarios/`` with a ``NAME`` (the table's first
column), a ``TITLE`` (one line for people) and ``run(config) -> list[Result]``: one row per
backend it exercised. ``run.py`` prints every row and exits non-zero when any row is not ok.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import re
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import FrameType

import agentsession as ags
from agentsession.errors import SessionError
from agentsession.validation import provider_errors

BACKENDS = ("jsonl-flush", "jsonl-fsync", "sqlite", "postgres")
"""Backend names a scenario may be asked to run on (``--backends``)."""


@dataclasses.dataclass
class Config:
    """One run of the harness."""

    quick: bool
    """The CI configuration (fewer trials, a few minutes in all); ``--full`` clears it."""
    backends: tuple[str, ...]
    """Backends to exercise (a subset of :data:`BACKENDS`)."""
    workdir: Path
    """A private temporary directory, removed after the run."""
    seed: int
    """Seed of every random choice (printed, so a failing run can be repeated)."""
    postgres_dsn: str | None = None
    """The shared PostgreSQL server (``AGENTSESSION_TEST_POSTGRES_DSN``); None: ``run.py``
    takes postgres out of :attr:`backends` and adds a skipped row in its place, so a scenario
    never sees postgres without a DSN."""

    def trials(self, quick: int, full: int) -> int:
        """The trial count for this configuration."""
        return quick if self.quick else full

    def rng(self, scenario: str) -> random.Random:
        """A random generator of its own for ``scenario``, from the run's seed."""
        return random.Random(f"{self.seed}:{scenario}")

    def store_url(self, backend: str, name: str) -> tuple[str, dict[str, object]]:
        """URL and ``open_store`` options of a fresh store of ``backend`` named ``name``.

        PostgreSQL stores get a schema of their own (dropped by :func:`drop_postgres_schema`).
        """
        if backend in ("jsonl-flush", "jsonl-fsync"):
            path = self.workdir / f"{name}-{backend}"
            return str(path), {"durability": backend.split("-")[1]}
        if backend == "sqlite":
            self.workdir.mkdir(parents=True, exist_ok=True)
            return f"sqlite:///{self.workdir / f'{name}.db'}", {}
        if backend == "postgres":
            if not self.postgres_dsn:
                raise RuntimeError("no PostgreSQL DSN")
            schema = f"rel_{name}_{os.getpid()}".replace("-", "_").lower()
            sep = "&" if "?" in self.postgres_dsn else "?"
            return f"{self.postgres_dsn}{sep}schema={schema}", {"durability": "fsync"}
        raise ValueError(f"unknown backend {backend!r}")

    def drop_store(self, backend: str, url: str) -> None:
        """Drop the PostgreSQL schema of a :meth:`store_url` store (nothing for the other
        backends, whose files go with the work directory)."""
        if backend == "postgres" and self.postgres_dsn:
            drop_postgres_schema(self.postgres_dsn, url)


@dataclasses.dataclass
class Result:
    """One row of the table: a scenario on one backend."""

    scenario: str
    backend: str
    trials: int = 0
    acknowledged: int = 0
    """Appends (events) the writers were told succeeded."""
    found: int = 0
    """Of those, how many were found afterwards (each counted once)."""
    lost: int = 0
    """Acknowledged events missing afterwards."""
    duplicated: int = 0
    """Events stored more than once (same id or same content at two seqs)."""
    unopenable: int = 0
    """Sessions that could not be opened or read afterwards."""
    invalid: int = 0
    """Derived histories that a provider would reject (``provider_errors``)."""
    uncaught: int = 0
    """Exceptions outside the ``SessionError`` tree (a bug wherever they come from)."""
    errors: int = 0
    """``SessionError``s surfaced to callers: allowed where the fault makes them expected
    (disk full, a dead server); the scenario's notes say which."""
    notes: list[str] = dataclasses.field(default_factory=list)
    skipped: str = ""
    """Why the row did not run (no PostgreSQL, no privilege), or empty."""
    expected_errors: bool = True
    """Whether ``errors`` are expected for this fault (False: any error fails the row)."""
    violations: int = 0
    """Broken invariants other than the columns above (seqs not gap-free, two holders of one
    turn lock, a second ``recover()`` that wrote, a special file followed or hung on...); the
    notes say which. Any violation fails the row."""

    @property
    def ok(self) -> bool:
        """No loss, no duplicate, nothing unopenable, invalid, uncaught or violated."""
        if self.skipped:
            return True
        bad = self.lost + self.duplicated + self.unopenable + self.invalid + self.uncaught
        bad += self.violations
        return bad == 0 and (self.expected_errors or self.errors == 0)

    @property
    def outcome(self) -> str:
        """``ok``, ``FAIL`` or ``skipped``."""
        if self.skipped:
            return "skipped"
        return "ok" if self.ok else "FAIL"


def count_exception(result: Result, exc: BaseException, context: str = "") -> None:
    """Count ``exc`` as an error (a ``SessionError``) or an uncaught exception (anything else,
    with a note naming it)."""
    if isinstance(exc, SessionError):
        result.errors += 1
    else:
        result.uncaught += 1
        where = f" ({context})" if context else ""
        result.notes.append(f"uncaught {type(exc).__name__}{where}: {exc}"[:300])


def check_history(
    session: ags.Session, result: Result, agents: Iterable[str | None] = (None,)
) -> None:
    """Count a provider-invalid derived history of ``session`` (for each of ``agents``)."""
    for agent in agents:
        problems = provider_errors(session.messages(agent=agent))
        if problems:
            result.invalid += 1
            result.notes.append(f"{session.id} ({agent or 'all'}): {problems[0]}"[:300])


def tally(result: Result, acknowledged: Sequence[str], stored: Sequence[str]) -> None:
    """Compare acknowledged event keys with the keys found in the log (one per stored event):
    counts acknowledged, found, lost and duplicated."""
    counts: dict[str, int] = {}
    for key in stored:
        counts[key] = counts.get(key, 0) + 1
    result.acknowledged += len(acknowledged)
    for key in acknowledged:
        if counts.get(key, 0) >= 1:
            result.found += 1
        else:
            result.lost += 1
    result.duplicated += sum(n - 1 for n in counts.values() if n > 1)


def postgres_schema(url: str) -> str:
    """The schema a :meth:`Config.store_url` PostgreSQL URL names."""
    return url.rsplit("schema=", 1)[1].split("&")[0]


def drop_postgres_schema(dsn: str, url: str) -> None:
    """Drop the schema a :meth:`Config.store_url` PostgreSQL URL names."""
    import psycopg

    schema = postgres_schema(url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# ---------------------------------------------------------------------------------------------
# Added for process_kill, contention and regressions (usable by every scenario).

KEY_RE = re.compile(r"K:[A-Za-z0-9_.\-]+")
"""The harness's event keys: ``K:<token>``, written into the text of every content event a
scenario writes (a message's text, a tool result's content), so that each stored event can be
told apart and counted (see :func:`event_key`)."""

MAX_NOTES = 12
"""Notes kept per row (the rest are counted in one last note)."""


def encoded_key(line: bytes) -> str:
    """An encoded event (``encode_event``) as a key for :func:`tally`: its bytes, byte for
    byte (invalid UTF-8 kept as surrogates)."""
    return line.decode("utf-8", "surrogateescape")


def text_key(text: str) -> str | None:
    """The first harness key in ``text``, or None."""
    match = KEY_RE.search(text)
    return match.group(0) if match else None


def event_key(event: ags.Event) -> str | None:
    """The key identifying a stored event the harness wrote, or None for events it cannot tell
    apart (compaction markers, fork and merge bookkeeping, recovery's repairs...).

    * ``user/message``, ``assistant/message``: the key in the message's text;
    * ``tool/result``: the key in its content (recovery's interrupted results carry none);
    * ``tool/call``: ``call:<id>``; ``usage``: ``usage:<input tokens>`` (unique per session
      by construction);
    * the recorder's markers, by the turn id it stamps in ``meta`` (recovery's repairs carry
      none): ``ts:<turn>``, ``te:<turn>``, ``ss:<turn>:<step>``, ``se:<turn>:<step>``;
    * an application event (``rel/...``) whose payload is an object with a ``key``.

    A payload that does not decode raises (msgspec's errors): the caller counts it.
    """
    kind = event.type
    meta = event.meta if isinstance(event.meta, dict) else {}
    turn = meta.get("turn_id")
    if kind in ("user/message", "assistant/message"):
        message = event.payload()
        return text_key(message.text) if isinstance(message, ags.Message) else None
    if kind == "tool/result":
        result = event.payload()
        return text_key(result.content) if isinstance(result, ags.ToolResult) else None
    if kind == "tool/call":
        call = event.payload()
        return f"call:{call.id}" if isinstance(call, ags.ToolCall) else None
    if kind == "usage":
        return f"usage:{event.payload().input_tokens}"
    if kind in ("turn/start", "turn/end") and isinstance(turn, str):
        return f"{'ts' if kind == 'turn/start' else 'te'}:{turn}"
    if kind in ("step/start", "step/end") and isinstance(turn, str):
        return f"{'ss' if kind == 'step/start' else 'se'}:{turn}:{event.payload().step}"
    if kind.startswith("rel/"):
        data = event.payload()
        if isinstance(data, dict) and isinstance(data.get("key"), str):
            return str(data["key"])
    return None


def stored_keys(events: Sequence[ags.Event], result: Result, where: str = "") -> list[str]:
    """The keys of ``events`` (one per keyed event); a payload that does not decode is counted
    as a violation."""
    keys: list[str] = []
    for event in events:
        try:
            key = event_key(event)
        except Exception as exc:
            violation(result, f"{where} seq {event.seq} ({event.type}) does not decode: {exc}")
            continue
        if key is not None:
            keys.append(key)
    return keys


def message_keys(messages: Iterable[ags.Message]) -> set[str]:
    """The harness keys visible in a derived history (message texts and tool results)."""
    keys: set[str] = set()
    for message in messages:
        for text in (message.text, *(r.content for r in message.tool_results)):
            keys.update(KEY_RE.findall(text))
    return keys


def note(result: Result, text: str) -> None:
    """Add a note to ``result``, keeping at most :data:`MAX_NOTES`."""
    if len(result.notes) < MAX_NOTES:
        result.notes.append(text[:300])
    elif len(result.notes) == MAX_NOTES:
        result.notes.append("(more notes left out)")


def violation(result: Result, text: str) -> None:
    """Count a broken invariant (see :attr:`Result.violations`), with a note."""
    result.violations += 1
    note(result, text)


def check_seqs(events: Sequence[ags.Event], result: Result, where: str = "") -> None:
    """Count a violation unless the seqs of ``events`` (a whole log) are 1..n, gap-free."""
    seqs = [event.seq for event in events]
    if seqs != list(range(1, len(seqs) + 1)):
        bad = next((i for i, seq in enumerate(seqs) if seq != i + 1), len(seqs))
        shown = seqs[bad : bad + 3]
        violation(result, f"{where}: seqs not gap-free from 1 (at index {bad}: {shown})")


# -- child processes ---------------------------------------------------------------------------

_LIVE: set[int] = set()
"""Process groups started by :func:`spawn` and not reaped yet."""


class Proc:
    """A forked child in a process group of its own, reporting lines through a pipe."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd: int | None = fd
        self.lines: list[str] = []
        self.status: int | None = None
        """``os.waitpid`` status once reaped."""
        self.killed_at: float | None = None
        """``time.monotonic()`` when SIGKILL was sent (None: not killed)."""
        self._buf = b""

    def read(self) -> list[str]:
        """Read what is available (without waiting); the new complete lines."""
        if self.fd is None:
            return []
        new: list[str] = []
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                os.close(self.fd)
                self.fd = None
                break
            self._buf += chunk
            if len(chunk) < 65536:
                break
        *complete, self._buf = self._buf.split(b"\n")
        new = [line.decode("utf-8", "replace") for line in complete]
        self.lines.extend(new)
        return new

    @property
    def exited(self) -> bool:
        """Reaped (after :meth:`poll` or :meth:`finish`)."""
        return self.status is not None

    def poll(self) -> bool:
        """Reap the child when it has exited; whether it has."""
        if self.status is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid == self.pid:
                self._reaped(status)
        return self.status is not None

    def _reaped(self, status: int) -> None:
        self.status = status
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)  # whatever it started
        _LIVE.discard(self.pid)

    def kill(self) -> float:
        """SIGKILL the child's process group; the time it was sent."""
        now = time.monotonic()
        if self.status is None:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
            if self.killed_at is None:
                self.killed_at = now
        return now

    def finish(self, timeout: float = 0.0) -> None:
        """Wait up to ``timeout`` seconds for the child to exit (reading its lines), kill it if
        it has not, reap it and read what it reported."""
        deadline = time.monotonic() + timeout
        pump([self], deadline)
        if not self.poll():
            self.kill()
            _, status = os.waitpid(self.pid, 0)
            self._reaped(status)
        while self.fd is not None:
            pump([self], time.monotonic() + 5)
            if self.fd is not None:  # a grandchild keeps the pipe open: it was killed
                os.close(self.fd)
                self.fd = None

    @property
    def exit_code(self) -> int | None:
        """The exit code (negative: killed by that signal), None while running."""
        if self.status is None:
            return None
        return os.waitstatus_to_exitcode(self.status)

    def problems(self) -> list[tuple[str, str]]:
        """``("error" | "uncaught", text)`` for each exception the child reported."""
        found: list[tuple[str, str]] = []
        for line in self.lines:
            if line.startswith("!error "):
                found.append(("error", line[7:]))
            elif line.startswith("!uncaught "):
                found.append(("uncaught", line[10:]))
        return found


def spawn(target: Callable[[Callable[[str], None]], None]) -> Proc:
    """Fork a child in a process group of its own that runs ``target(report)``;
    ``report(line)`` sends one line to the parent (read with :meth:`Proc.read` or
    :func:`pump`). An exception escaping ``target`` is reported as ``!error <type>: <msg>``
    (a ``SessionError``) or ``!uncaught <type>: <msg> at <file:line>``; the child always ends
    with ``os._exit``. Stores must not be open in the calling process."""
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            os.setpgid(0, 0)
            os.close(read_fd)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _LIVE.clear()

            def report(line: str) -> None:
                data = (line.replace("\n", " ") + "\n").encode("utf-8", "replace")
                while data:
                    data = data[os.write(write_fd, data) :]

            try:
                target(report)
            except SessionError as exc:
                report(f"!error {type(exc).__name__}: {exc}")
                code = 3
            except BaseException as exc:
                frames = traceback.extract_tb(exc.__traceback__)
                where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
                report(f"!uncaught {type(exc).__name__}: {exc}{where}")
                code = 4
        finally:
            os._exit(code)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    _LIVE.add(pid)
    return Proc(pid, read_fd)


def pump(
    procs: Sequence[Proc],
    deadline: float,
    on_line: Callable[[Proc, str], None] | None = None,
    *,
    until: Callable[[], bool] | None = None,
) -> None:
    """Read the children's lines until every one has exited and closed its pipe, ``until()``
    is true, or ``time.monotonic()`` passes ``deadline``; ``on_line`` is called per line."""
    while True:
        open_fds = {p.fd: p for p in procs if p.fd is not None}
        for proc in procs:
            if proc.fd is None:
                proc.poll()
        if not open_fds and all(p.exited for p in procs):
            return
        if until is not None and until():
            return
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if open_fds:
            ready, _, _ = select.select(list(open_fds), [], [], min(left, 0.05))
        else:
            time.sleep(min(left, 0.01))
            ready = []
        for fd in ready:
            proc = open_fds[fd]
            for line in proc.read():
                if on_line is not None:
                    on_line(proc, line)


def kill_all() -> None:
    """SIGKILL and reap every child :func:`spawn` started that is not reaped yet."""
    for pid in list(_LIVE):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        _LIVE.discard(pid)


def count_problems(result: Result, proc: Proc, who: str) -> None:
    """Count the exceptions ``proc`` reported: ``SessionError`` as errors, anything else as
    uncaught (with a note)."""
    for kind, text in proc.problems():
        if kind == "error":
            result.errors += 1
            if not result.expected_errors:
                note(result, f"{who}: {text}")
        else:
            result.uncaught += 1
            note(result, f"{who}: uncaught {text}")


class Hang(Exception):
    """A trial that did not answer within its :func:`deadline`."""


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Raise :class:`Hang` in the block after ``seconds`` (``SIGALRM``: the main thread only;
    elsewhere the block runs unguarded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"no answer within {seconds}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
