"""Fuzzed stored data: mutate valid JSONL logs, SQLite rows and PostgreSQL rows, then open,
read, derive the history and append.

Each trial must end in one of two ways, within a deadline: it works, or it raises
``CorruptLogError`` (JSONL with ``on_corrupt="raise"``; any ``StorageError`` for a SQL row the
backend cannot decode). Never another exception, never a hang, and never a valid event before
the first damaged byte (JSONL) or damaged row (SQL) missing or read back differently. With
``on_corrupt="quarantine"`` a JSONL log must read, and every byte taken out of it must be in
its quarantine sidecar.

Mutations. JSONL: bit flips, truncation at byte offsets (every offset in full mode, a sample in
quick mode), inserted garbage, duplicated and swapped lines (duplicate and out-of-order seqs),
invalid UTF-8 inside strings, a field replaced by a strange JSON value (huge or negative seqs,
floats, wrong types), deeply nested JSON, one very long line (5 MB in quick mode, 100 MB in
full mode), and hypothesis-generated edit lists. SQLite and PostgreSQL: ``UPDATE`` of
``data``, ``meta``, ``seq``, ``type``, ``time``, deleted rows and a wrong ``last_seq``, with
values from the same families (hypothesis generates the payload bytes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import agentsession as ags
from agentsession.events import encode_event

from ..common import (
    Config,
    Hang,
    Result,
    deadline,
    drop_postgres_schema,
    encoded_key,
    note,
    postgres_schema,
    tally,
    violation,
)

NAME = "fuzz"
TITLE = "Fuzzed logs and rows: CorruptLogError or the valid events, never a crash or a hang"

SID = "slack:C777:t:1712345678.1"
TRIAL_TIMEOUT = 30
_TIME = b'"2026-01-01T00:00:00.000000Z"'


# -- the valid log ----------------------------------------------------------------------------


def _write_base(store: ags.BaseStore) -> None:
    """A realistic log: recorded turns with tool calls, a batch, a compaction, odd text."""
    session = store.get(SID)
    session.append(ags.Event.new("user/message", ags.Message.user("héllo \u2028 \"quoted\" \\ "),
                                 agent="coder", user="U1", meta={"channel": "C777"}))
    for n in range(3):
        with session.turn(agent="coder", user="U1", batch_steps=n == 1) as turn:
            turn.user(f"task {n}: {'ü漢' * 20}")
            with turn.step() as step:
                call = ags.ToolCall(id=f"call_{n}", name="grep", arguments={"q": "x" * 40, "n": n})
                step.assistant("looking", tool_calls=[call])
                step.tool_result(call.id, "grep", "result line\n" * (10 + n * 30))
                step.usage(input_tokens=100 + n, output_tokens=7)
            turn.assistant(f"done {n}")
    session.append_many([ags.Event.new("rel/note", {"key": f"K:b{i}", "v": [i, None, 1.5]})
                         for i in range(3)])
    session.compact(ags.Message.user("Summary so far"), keep_turns=1)
    with session.turn(agent="coder") as turn:
        turn.user("after the compaction")
        turn.assistant("ok")


# -- deadlines --------------------------------------------------------------------------------


def _exercise(
    result: Result,
    where: str,
    open_store: Callable[[], ags.BaseStore],
    before: list[bytes],
    clean: tuple[type[BaseException], ...],
    *,
    strict_append: bool = True,
) -> list[bytes] | None:
    """Open, read, derive, append; check that ``before`` (encoded events) is read back first.
    Returns what was read (None when it raised). With ``strict_append``, the append must get a
    seq above every seq read (else a note only: a SQL row whose seq was changed by hand
    disagrees with the session row's ``last_seq``, which the backend trusts)."""
    result.trials += 1
    store: ags.BaseStore | None = None
    found: list[bytes] | None = None
    try:
        with deadline(TRIAL_TIMEOUT):
            store = open_store()
            session = store.get(SID)
            events = session.read()
            found = [encode_event(e) for e in events]
            tally(
                result,
                [encoded_key(e) for e in before],
                [encoded_key(e) for e in found[: len(before)]],
            )
            if found[: len(before)] != before:
                violation(result, f"{where}: the events before the damage read back differently")
            session.messages()
            _ = session.latest_seq
            try:
                seq = session.append(ags.Event.new("rel/after", {"key": "K:after"}))
                latest = events[-1].seq if events else 0
                if seq <= latest:
                    text = f"{where}: an append got seq {seq} after seq {latest}"
                    if strict_append:
                        violation(result, text)
                    else:
                        note(result, text)
            except clean:
                result.errors += 1
    except Hang as exc:
        result.uncaught += 1
        note(result, f"{where}: hang: {exc}")
    except clean:
        result.errors += 1
        found = None
    except ags.SessionError as exc:
        violation(result, f"{where}: {type(exc).__name__} (not a corruption error): {exc}")
        found = None
    except Exception as exc:
        result.uncaught += 1
        note(result, f"{where}: uncaught {type(exc).__name__}: {exc}")
        found = None
    finally:
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
    return found


# -- JSONL ------------------------------------------------------------------------------------


class JsonlLog:
    """The valid log: its bytes, its lines' spans and the encoded event of each line."""

    def __init__(self, base: Path) -> None:
        store = ags.open_store(str(base / "origin"))
        try:
            _write_base(store)
            session = store.get(SID)
            self.path_name = os.path.basename(session.location)
            self.events = [encode_event(e) for e in session.read()]
            with open(session.location, "rb") as f:
                self.data = f.read()
        finally:
            store.close()
        self.spans: list[tuple[int, int]] = []  # (start, end) of each line, newline included
        self.batch_end: list[int] = []  # end offset of the batch each line belongs to
        pos = 0
        for line in self.data.splitlines(keepends=True):
            self.spans.append((pos, pos + len(line)))
            pos += len(line)
        end = len(self.data)
        for i in range(len(self.spans) - 1, -1, -1):
            start, stop = self.spans[i]
            if b'"more":true' not in self.data[start: start + 40]:
                end = stop
            self.batch_end.append(end)
        self.batch_end.reverse()
        assert len(self.spans) == len(self.events)

    def before(self, damage: int) -> list[bytes]:
        """Events of whole batches that end at or before byte ``damage``."""
        return [e for e, end in zip(self.events, self.batch_end, strict=True) if end <= damage]


def _first_diff(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # binary search on equal prefixes
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


_STRANGE_VALUES = [b"99999999999999999999999", b"-1", b"0", b"1.5", b"1e400", b'"7"', b"null",
                   b"true", b"[]", b"{}", b'"\\ud800"', b'"\\u0000"', b"18446744073709551616",
                   b'"' + b"\xff\xfe" + b'"', b"NaN", b'{"a":' * 50 + b"1" + b"}" * 50]
_FIELDS = [b'"seq":', b'"type":', b'"time":', b'"data":', b'"meta":', b'"agent":', b'"role":',
           b'"more":', b'"firstKeptSeq":', b'"callId":', b'"steps":']


def _replace_value(line: bytes, field: bytes, value: bytes) -> bytes | None:
    """``line`` with the JSON value after ``field`` replaced (a rough scan, enough for fuzz)."""
    at = line.find(field)
    if at < 0:
        return None
    start = at + len(field)
    depth, pos, in_str = 0, start, False
    while pos < len(line):
        ch = line[pos:pos + 1]
        if in_str:
            if ch == b"\\":
                pos += 1
            elif ch == b'"':
                in_str = False
        elif ch == b'"':
            in_str = True
        elif ch in b"[{":
            depth += 1
        elif ch in b"]}":
            if depth == 0:
                break
            depth -= 1
        elif ch == b"," and depth == 0:
            break
        pos += 1
    return line[:start] + value + line[pos:]


def _mutations(log: JsonlLog, rng: random.Random, quick: bool) -> Iterator[tuple[str, bytes]]:
    data = log.data
    n = len(data)
    lines = [data[s:e] for s, e in log.spans]
    # Truncation at byte offsets.
    offsets = range(n) if not quick else sorted(rng.sample(range(n), min(n, 300)))
    for k in offsets:
        yield f"truncate at {k}", data[:k]
    for _ in range(300 if quick else 3000):
        k = rng.randrange(n)
        flipped = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 8))):
            flipped[min(n - 1, k + rng.randrange(4))] ^= 1 << rng.randrange(8)
        yield f"bit flip at {k}", bytes(flipped)
    for _ in range(100 if quick else 600):
        k = rng.randrange(n + 1)
        garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        if rng.random() < 0.5:
            garbage += b"\n"
        yield f"garbage at {k}", data[:k] + garbage + data[k:]
    for _ in range(20 if quick else 200):
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        dup = [*lines[:j], lines[i], *lines[j:]]
        yield f"line {i} duplicated before line {j}", b"".join(dup)
        if i != j:
            swapped = list(lines)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            yield f"lines {i} and {j} swapped", b"".join(swapped)
    for _ in range(30 if quick else 400):
        i = rng.randrange(len(lines))
        quote = lines[i].find(b'":"', 10)
        bad = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"])
        if quote > 0:
            at = quote + 3
            changed = [*lines[:i], lines[i][:at] + bad + lines[i][at:], *lines[i + 1:]]
            yield f"invalid UTF-8 in line {i}", b"".join(changed)
    for _ in range(150 if quick else 1000):
        i = rng.randrange(len(lines))
        field, value = rng.choice(_FIELDS), rng.choice(_STRANGE_VALUES)
        replaced = _replace_value(lines[i], field, value)
        if replaced is not None:
            out = [*lines[:i], replaced, *lines[i + 1:]]
            yield f"line {i}: {field.decode()} {value[:20]!r}", b"".join(out)
    last_seq = len(lines)
    for depth in (300, 1000, 100_000):
        for where in ("data", "meta"):
            deep = b"[" * depth + b"]" * depth if where == "data" else (
                b'{"a":' * depth + b"1" + b"}" * depth)
            line = b'{"seq":%d,"type":"rel/deep","time":%s,"%s":%s}\n' % (
                last_seq + 1, _TIME, where.encode(), deep)
            yield f"{where} nested {depth} deep at the end", data + line
            mid = log.spans[len(lines) // 2][0]
            yield f"{where} nested {depth} deep in the middle", data[:mid] + line + data[mid:]
    big = (100 << 20) if not quick else (5 << 20)
    blob = b"x" * big
    line = b'{"seq":%d,"type":"rel/big","time":%s,"data":{"blob":"%s"}}\n' % (
        last_seq + 1, _TIME, blob)
    yield f"a valid {big >> 20} MB line at the end", data + line
    yield f"a torn {big >> 20} MB line at the end", data + line[: len(line) // 2]
    mid = log.spans[len(lines) // 2][0]
    yield f"{big >> 20} MB of garbage in the middle", data[:mid] + blob + b"\n" + data[mid:]


def _structured(log: JsonlLog, rng: random.Random, examples: int, seed: int
                ) -> Iterator[tuple[str, bytes]]:
    """Hypothesis-generated edit lists (positions, kinds, bytes), applied to the log."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    edit = st.tuples(
        st.floats(0, 1),
        st.sampled_from(["flip", "insert", "delete", "replace", "newline"]),
        st.binary(min_size=1, max_size=24),
    )
    found: list[tuple[str, bytes]] = []

    @hseed(seed)
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.lists(edit, min_size=1, max_size=4))
    def collect(edits: list[tuple[float, str, bytes]]) -> None:
        data = bytearray(log.data)
        for fraction, kind, payload in edits:
            k = min(len(data), int(fraction * len(data)))
            if kind == "flip" and k < len(data):
                data[k] ^= payload[0] or 1
            elif kind == "insert":
                data[k:k] = payload
            elif kind == "delete":
                del data[k:k + len(payload)]
            elif kind == "replace":
                data[k:k + len(payload)] = payload
            elif kind == "newline":
                data[k:k] = b"\n"
        found.append((f"hypothesis edits {[(round(f, 3), k) for f, k, _ in edits]}", bytes(data)))

    collect()
    yield from found


def _quarantine_check(log_path: Path, mutated: bytes, result: Result, where: str) -> None:
    """Every byte taken out of the log (a cut tail, lines blanked in place) is in the
    quarantine sidecar."""
    now = log_path.read_bytes() if log_path.exists() else b""
    side = Path(str(log_path) + ".quarantine")
    kept = side.read_bytes() if side.exists() else b""
    removed: list[tuple[int, bytes]] = []
    if len(now) < len(mutated):
        removed.append((len(now), mutated[len(now):]))
    run_start = -1
    for i in range(min(len(now), len(mutated)) + 1):
        blanked = i < len(now) and now[i] == 0x20 and mutated[i] != 0x20
        if blanked and run_start < 0:
            run_start = i
        elif not blanked and run_start >= 0:
            removed.append((run_start, mutated[run_start:i]))
            run_start = -1
    missing = []
    for at, chunk in removed:
        # The reader splits lines as bytes.splitlines does (\r too): each piece is kept.
        pieces = [p for p in re.split(rb"[\r\n]+", chunk) if p.strip()]
        if any(p not in kept for p in pieces):
            missing.append(f"{len(chunk)} bytes at {at}")
    if missing:
        violation(result, f"{where}: bytes taken out of the log are not in the quarantine: "
                          f"{missing[:2]}")


def _fuzz_jsonl(config: Config, base: Path, rng: random.Random) -> list[Result]:
    log = JsonlLog(base)
    rows = {mode: Result(NAME, f"jsonl on_corrupt={mode}") for mode in ("raise", "quarantine")}
    cases = list(_mutations(log, rng, config.quick))
    cases += list(_structured(log, rng, config.trials(200, 1500), config.seed))
    started = time.monotonic()
    budget = 15.0 if config.quick else 1e9
    count = 0
    for label, mutated in cases:
        if time.monotonic() - started > budget:
            for row in rows.values():
                note(row, f"time budget reached after {count} of {len(cases)} mutations")
            break
        count += 1
        damage = _first_diff(log.data, mutated)
        before = log.before(damage)
        for mode, row in rows.items():
            root = base / f"j{count}-{mode}"
            root.mkdir(parents=True)
            path = root / log.path_name
            path.write_bytes(mutated)
            path.chmod(0o600)
            clean: tuple[type[BaseException], ...] = (
                (ags.CorruptLogError,) if mode == "raise" else ())
            found = _exercise(
                row, label, lambda r=root, m=mode: ags.open_store(str(r), on_corrupt=m),
                before, clean)
            if mode == "quarantine":
                if found is None:
                    row.unopenable += 1
                else:
                    _quarantine_check(path, mutated, row, label)
            shutil.rmtree(root, ignore_errors=True)
    for mode, row in rows.items():
        expected = "CorruptLogError" if mode == "raise" else "none"
        row.notes.insert(0, f"{count} mutated logs of {len(log.data)} bytes / "
                         f"{len(log.events)} events; expected errors: {expected}")
    return list(rows.values())


# -- SQL rows ---------------------------------------------------------------------------------


def _sql_values(rng: random.Random, quick: bool) -> list[tuple[str, bytes]]:
    """Payload bytes for ``data``/``meta``: garbage, invalid UTF-8, strange JSON, deep, big."""
    big = (100 << 20) if not quick else (5 << 20)
    values = [
        ("garbage", bytes(rng.randrange(256) for _ in range(40))),
        ("invalid UTF-8", b'{"role":"user","parts":[{"type":"text","text":"\xff\xfe"}]}'),
        ("encoded surrogate", b'"\xed\xa0\x80"'),
        ("truncated JSON", b'{"role":"user","parts":[{"type":"te'),
        ("empty", b""),
        ("NUL", b"\x00"),
        ("array", b"[1,2,3]"),
        ("number", b"99999999999999999999999"),
        ("wrong types", b'{"role":7,"parts":"x","toolCalls":[{"id":5}]}'),
        ("deep 1000", b"[" * 1000 + b"]" * 1000),
        ("deep 100000", b"[" * 100_000 + b"]" * 100_000),
        ("object deep 5000", b'{"a":' * 5000 + b"1" + b"}" * 5000),
        (f"{big >> 20} MB string", b'"' + b"y" * big + b'"'),
    ]
    return values


def _hypothesis_values(examples: int, seed: int) -> list[tuple[str, bytes]]:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
        | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                    max_size=4),
        max_leaves=20,
    )
    out: list[tuple[str, bytes]] = []

    @hseed(seed)
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(st.binary(max_size=60), json_values.map(
        lambda v: __import__("json").dumps(v).encode())))
    def collect(value: bytes) -> None:
        out.append((f"hypothesis {value[:24]!r}", value))

    collect()
    return out


class SqlTarget:
    """A backend's events table: apply a mutation, restore the pristine rows."""

    name: str
    url: str
    options: dict[str, Any]

    def mutate(self, kind: str, seq: int, value: bytes) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SqliteTarget(SqlTarget):
    def __init__(self, base: Path) -> None:
        self.name = "sqlite"
        self.path = base / "fuzz.db"
        self.pristine = base / "pristine.db"
        self.url, self.options = f"sqlite:///{self.path}", {}
        store = ags.open_store(self.url)
        try:
            _write_base(store)
        finally:
            store.close()
        conn = sqlite3.connect(self.path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        shutil.copyfile(self.path, self.pristine)

    def mutate(self, kind: str, seq: int, value: bytes) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute("PRAGMA ignore_check_constraints = ON")
            text: Any = value
            with contextlib.suppress(UnicodeDecodeError):
                text = value.decode("utf-8")  # valid UTF-8 as TEXT, the rest as a BLOB
            if kind in ("data", "meta", "type", "time", "agent"):
                conn.execute(f'UPDATE events SET "{kind}" = ? WHERE seq = ?', (text, seq))
            elif kind == "seq":
                conn.execute("UPDATE events SET seq = ?, key = (key >> 32 << 32) | ? "
                             "WHERE seq = ?", (int(value), int(value) & 0xFFFFFFFF, seq))
            elif kind == "seq-only":
                conn.execute("UPDATE events SET seq = ? WHERE seq = ?", (int(value), seq))
            elif kind == "delete":
                conn.execute("DELETE FROM events WHERE seq = ?", (seq,))
            elif kind == "compaction_seq":
                conn.execute("UPDATE sessions SET compaction_seq = ?", (int(value),))
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()

    def restore(self) -> None:
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.path) + suffix)
        shutil.copyfile(self.pristine, self.path)


class PostgresTarget(SqlTarget):
    def __init__(self, config: Config) -> None:
        import psycopg

        self.name = "postgres"
        assert config.postgres_dsn
        self.dsn = config.postgres_dsn
        self.url, self.options = config.store_url("postgres", NAME)
        self.schema = postgres_schema(self.url)
        drop_postgres_schema(self.dsn, self.url)
        store = ags.open_store(self.url, **self.options)
        try:
            _write_base(store)
        finally:
            store.close()
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        s = self.schema
        self.conn.execute(f'CREATE TABLE "{s}".pristine_events AS SELECT * FROM "{s}".events')
        self.conn.execute(f'CREATE TABLE "{s}".pristine_sessions AS SELECT * FROM "{s}".sessions')

    def mutate(self, kind: str, seq: int, value: bytes) -> None:
        s = self.schema
        text = value.decode("utf-8", "replace").replace("\x00", "")
        if kind in ("data", "meta", "raw_event"):
            self.conn.execute(f'UPDATE "{s}".events SET {kind} = %s WHERE seq = %s', (value, seq))
        elif kind in ("type", "agent"):
            self.conn.execute(f'UPDATE "{s}".events SET {kind} = %s WHERE seq = %s', (text, seq))
        elif kind == "time":
            self.conn.execute(f'UPDATE "{s}".events SET time = %s::timestamptz WHERE seq = %s',
                              (text, seq))
        elif kind in ("seq", "seq-only"):
            self.conn.execute(f'UPDATE "{s}".events SET seq = %s WHERE seq = %s',
                              (int(value), seq))
        elif kind == "delete":
            self.conn.execute(f'DELETE FROM "{s}".events WHERE seq = %s', (seq,))
        elif kind == "last_seq":
            self.conn.execute(f'UPDATE "{s}".sessions SET last_seq = %s', (int(value),))
        elif kind == "compaction_seq":
            self.conn.execute(f'UPDATE "{s}".sessions SET compaction_seq = %s', (int(value),))

    def restore(self) -> None:
        s = self.schema
        with self.conn.transaction():
            self.conn.execute(f'DELETE FROM "{s}".events')
            self.conn.execute(f'INSERT INTO "{s}".events SELECT * FROM "{s}".pristine_events')
            self.conn.execute(f'DELETE FROM "{s}".sessions')
            self.conn.execute(f'INSERT INTO "{s}".sessions SELECT * FROM "{s}".pristine_sessions')
            self.conn.execute(f'DELETE FROM "{s}".meta')

    def close(self) -> None:
        self.conn.close()
        drop_postgres_schema(self.dsn, self.url)


def _sql_cases(target: SqlTarget, n_events: int, rng: random.Random, config: Config
               ) -> Iterator[tuple[str, str, int, bytes]]:
    """(label, kind, seq, value) mutations: the damaged seq is the smallest one touched."""
    values = _sql_values(rng, config.quick)
    values += _hypothesis_values(config.trials(150, 1000), config.seed)
    kinds = ["data", "meta"] + (["raw_event"] if target.name == "postgres" else [])
    for label, value in values:
        for kind in kinds:
            seq = rng.randrange(1, n_events + 1)
            yield f"{kind}={label} at seq {seq}", kind, seq, value
    collide = rng.randrange(1, n_events)
    yield f"seq {collide} -> {n_events + 1} (the next append's)", "seq", collide, b"%d" % (
        n_events + 1)
    for _ in range(config.trials(4, 30)):
        seq = rng.randrange(1, n_events + 1)
        # n_events + 1: where the next append goes, so it collides (a clean error is due).
        new = rng.choice([seq + 5, n_events + 1, n_events + 50, max(1, seq - 1), 1 << 31,
                          1 << 40])
        if target.name == "sqlite" and new >= 1 << 32:
            new = (1 << 32) - 1
        yield f"seq {seq} -> {new}", "seq", seq, str(new).encode()
        if target.name == "sqlite":
            yield f"seq column only {seq} -> {new}", "seq-only", seq, str(new).encode()
        yield f"row {seq} deleted", "delete", seq, b""
    for value in (b"", b"user/message", b"session/compaction", b"\xff", b"x" * 1000):
        seq = rng.randrange(1, n_events + 1)
        yield f"type={value[:20]!r} at seq {seq}", "type", seq, value
    times = [b"infinity", b"-infinity", b"0001-01-01 00:00:00+00", b"294276-12-31 00:00:00+00"]
    if target.name == "sqlite":
        times += [b"garbage", b"", b"2026-13-45T99:99:99Z", b"\xff"]
    for value in times:
        seq = rng.randrange(1, n_events + 1)
        yield f"time={value!r} at seq {seq}", "time", seq, value
    for value in (b"\x00agent" if target.name == "sqlite" else b"ag\x01", b"\xff\xfe"):
        seq = rng.randrange(1, n_events + 1)
        yield f"agent={value!r} at seq {seq}", "agent", seq, value
    for value in (b"0", b"1", b"999999"):
        yield f"compaction_seq={value.decode()}", "compaction_seq", n_events + 1, value
        if target.name == "postgres":
            yield f"last_seq={value.decode()}", "last_seq", n_events + 1, value


def _fuzz_sql(config: Config, target: SqlTarget, rng: random.Random) -> Result:
    row = Result(NAME, target.name)
    store = ags.open_store(target.url, **target.options)
    try:
        pristine = [encode_event(e) for e in store.get(SID).read()]
    finally:
        store.close()
    started = time.monotonic()
    budget = (6.0 if target.name == "sqlite" else 8.0) if config.quick else 1e9
    cases = list(_sql_cases(target, len(pristine), rng, config))
    count = 0
    for label, kind, seq, value in cases:
        if time.monotonic() - started > budget:
            note(row, f"time budget reached after {count} of {len(cases)} mutations")
            break
        count += 1
        try:
            target.mutate(kind, seq, value)
        except Exception as exc:  # the database refused the mutation itself: not a trial
            note(row, f"{label}: mutation refused by the database: {type(exc).__name__}")
            target.restore()
            continue
        damaged = seq
        if kind in ("seq", "seq-only"):
            damaged = min(seq, int(value))
        before = pristine[: damaged - 1]
        _exercise(row, label, lambda: ags.open_store(target.url, **target.options), before,
                  (ags.StorageError,), strict_append=kind not in ("seq", "seq-only"))
        target.restore()
    row.notes.insert(0, f"{count} mutated rows (UPDATE/DELETE) of a {len(pristine)}-event "
                     "session; expected errors: StorageError (CorruptLogError or the driver's)")
    return row


def run(config: Config) -> list[Result]:
    logger = logging.getLogger("agentsession")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # thousands of quarantine warnings
    try:
        return _run(config)
    finally:
        logger.setLevel(level)


def _run(config: Config) -> list[Result]:
    rng = config.rng(NAME)
    base = config.workdir / NAME
    base.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    if {"jsonl-flush", "jsonl-fsync"} & set(config.backends):
        results += _fuzz_jsonl(config, base, rng)
    else:
        results.append(Result(NAME, "jsonl", skipped="not in --backends"))
    if "sqlite" in config.backends:
        target: SqlTarget = SqliteTarget(base)
        try:
            results.append(_fuzz_sql(config, target, rng))
        finally:
            target.close()
    if "postgres" in config.backends:
        pg = PostgresTarget(config)
        try:
            results.append(_fuzz_sql(config, pg, rng))
        finally:
            pg.close()
    shutil.rmtree(base, ignore_errors=True)
    return results
