"""The fault-injection harness (issue 18): runs every scenario of ``reliability/scenarios/`` on
the backends asked for and prints one row per scenario and backend::

    python reliability/run.py [--quick | --full] [--seed N] [--json FILE]
        [--backends jsonl-flush,jsonl-fsync,sqlite,postgres] [--only scenario,...]

``--quick`` (the default) is the CI configuration, a few minutes on 2 cores; ``--full`` runs
the full trial counts. PostgreSQL rows need ``AGENTSESSION_TEST_POSTGRES_DSN`` (skipped, with
the reason, when it is unset). The exit status is 1 when any row lost, duplicated, could not
open, derived a provider-invalid history, broke an invariant or raised outside the
``SessionError`` tree (or raised unexpected ``SessionError``s), 2 on a usage error, else 0.
The command line and the seed are printed, so a failing run can be repeated.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Protocol, TextIO, cast

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from reliability.common import BACKENDS, Config, Result, kill_all  # noqa: E402

SCENARIOS = (
    "process_kill",
    "power_loss",
    "pg_crash",
    "disk_full",
    "fuzz",
    "contention",
    "regressions",
)
"""Every scenario, in the order they run and are listed."""

POSTGRES_ENV = "AGENTSESSION_TEST_POSTGRES_DSN"
NO_POSTGRES = f"{POSTGRES_ENV} is not set"

COLUMNS = (
    ("scenario", "scenario"),
    ("backend", "backend"),
    ("trials", "trials"),
    ("acknowledged", "acknowledged"),
    ("found", "found"),
    ("lost", "lost"),
    ("duplicated", "duplicated"),
    ("unopenable", "unopenable"),
    ("provider-invalid", "invalid"),
    ("errors", "errors"),
    ("uncaught", "uncaught"),
    ("violations", "violations"),
    ("outcome", "outcome"),
)
"""Table header and the :class:`Result` attribute of each column."""


class Scenario(Protocol):
    """What a scenario module provides."""

    NAME: str
    TITLE: str

    def run(self, config: Config) -> list[Result]: ...


def load_scenarios(only: Sequence[str] | None = None) -> tuple[list[Scenario], list[str]]:
    """The scenario modules in :data:`SCENARIOS` order (only those named in ``only``), and a note
    for each that does not exist yet."""
    modules: list[Scenario] = []
    missing: list[str] = []
    for name in SCENARIOS:
        if only and name not in only:
            continue
        try:
            module = importlib.import_module(f"reliability.scenarios.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"reliability.scenarios.{name}":
                raise
            missing.append(f"scenario {name}: not written yet (no reliability/scenarios/{name}.py)")
            continue
        modules.append(cast("Scenario", module))
    return modules, missing


def run_scenarios(
    config: Config,
    scenarios: Sequence[Scenario],
    progress: TextIO | None = None,
) -> list[Result]:
    """Run each scenario; rows in order. A scenario that raises gets one failing row (the
    exception counted as uncaught). PostgreSQL is taken out of the backends a scenario sees
    when there is no DSN, and a skipped row stands in for it."""
    results: list[Result] = []
    postgres_skipped = "postgres" in config.backends and not config.postgres_dsn
    backends = tuple(b for b in config.backends if not (b == "postgres" and postgres_skipped))
    for scenario in scenarios:
        started = time.monotonic()
        if progress is not None:
            print(f"[{scenario.NAME}] {scenario.TITLE}", file=progress, flush=True)
        scenario_config = dataclasses.replace(config, backends=backends)
        try:
            rows = list(scenario.run(scenario_config)) if backends else []
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            row = Result(scenario=scenario.NAME, backend="-", uncaught=1)
            row.notes.append(f"the scenario raised {type(exc).__name__}: {exc}"[:300])
            rows = [row]
        finally:
            kill_all()  # whatever a scenario left running
        if postgres_skipped:
            rows.append(Result(scenario=scenario.NAME, backend="postgres", skipped=NO_POSTGRES))
        results.extend(rows)
        if progress is not None:
            took = time.monotonic() - started
            bad = sum(1 for row in rows if not row.ok)
            print(
                f"[{scenario.NAME}] {len(rows)} rows, {bad} failing, {took:.1f} s",
                file=progress,
                flush=True,
            )
    return results


def exit_code(results: Sequence[Result]) -> int:
    """0 when every row is ok (or skipped), else 1."""
    return 0 if all(row.ok for row in results) else 1


def format_table(results: Sequence[Result]) -> str:
    """The rows as an aligned plain-text table, followed by each row's notes and skip reason."""
    rows = [[head for head, _ in COLUMNS]]
    for row in results:
        cells = []
        for _, attr in COLUMNS:
            value = getattr(row, attr)
            if row.skipped and attr not in ("scenario", "backend", "outcome"):
                value = "-"
            cells.append(str(value))
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    numeric = {i for i, (_, attr) in enumerate(COLUMNS) if attr not in ("scenario", "backend")}
    lines = []
    for n, cells in enumerate(rows):
        parts = [
            cell.rjust(widths[i]) if i in numeric and n else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    details = []
    for row in results:
        said = [f"skipped: {row.skipped}"] if row.skipped else []
        said += row.notes
        if said:
            details.append(f"{row.scenario} / {row.backend} ({row.outcome}):")
            details.extend(f"    {text}" for text in said)
    if details:
        lines += ["", *details]
    return "\n".join(lines)


def report(results: Sequence[Result], out: TextIO | None = None) -> int:
    """Print the table (on stdout by default); the exit code it calls for (see
    :func:`exit_code`)."""
    out = sys.stdout if out is None else out
    print(format_table(results), file=out)
    code = exit_code(results)
    failing = [f"{r.scenario}/{r.backend}" for r in results if not r.ok]
    print("", file=out)
    print("FAIL: " + ", ".join(failing) if failing else "all rows ok", file=out)
    return code


def to_json(results: Sequence[Result]) -> list[dict[str, object]]:
    """The rows as JSON-ready dicts (every field, ``ok`` and ``outcome``)."""
    return [{**dataclasses.asdict(r), "ok": r.ok, "outcome": r.outcome} for r in results]


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python reliability/run.py",
        description="Fault-injection harness: every acknowledged event must survive the fault.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="the CI configuration (default)")
    mode.add_argument("--full", action="store_true", help="the full trial counts")
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help=f"comma-separated subset of {','.join(BACKENDS)} (default: all)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of every random choice")
    parser.add_argument(
        "--only", default="", help=f"comma-separated scenarios among {','.join(SCENARIOS)}"
    )
    parser.add_argument("--json", metavar="FILE", default=None, help="also write rows as JSON")
    args = parser.parse_args(list(argv))
    backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        parser.error(f"unknown backend(s) {unknown}; choose among {', '.join(BACKENDS)}")
    only = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose among {', '.join(SCENARIOS)}")
    args.backends = backends
    args.only = only
    return args


def _reproduce(argv: Sequence[str], seed: int) -> str:
    """The command line that repeats this run (the same arguments, with the seed)."""
    args = list(argv)
    cleaned: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--seed":
            skip = True
            continue
        if arg.startswith("--seed="):
            continue
        cleaned.append(arg)
    return shlex.join(["python", "reliability/run.py", *cleaned, "--seed", str(seed)])


def _drop_leftover_schemas(dsn: str) -> None:
    """Drop PostgreSQL schemas this run's scenarios named (``rel_*_<pid>``) and left behind."""
    try:
        import psycopg

        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s",
                (f"rel\\_%\\_{os.getpid()}",),
            ).fetchall()
            for (schema,) in rows:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except Exception as exc:  # cleanup only: never hides a result
        print(f"note: could not drop leftover schemas: {exc}", file=sys.stderr)


def main(
    argv: Sequence[str] | None = None,
    *,
    scenarios: Sequence[Scenario] | None = None,
    out: TextIO | None = None,
) -> int:
    """Run the harness; the exit code. ``scenarios`` replaces the discovered modules (tests);
    the table goes to ``out`` (default stdout), progress to stderr."""
    out = sys.stdout if out is None else out
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    dsn = os.environ.get(POSTGRES_ENV) or None
    print(f"command: {shlex.join(['python', 'reliability/run.py', *argv])}", file=out)
    print(f"seed: {seed}   reproduce: {_reproduce(argv, seed)}", file=out)
    print(
        f"mode: {'full' if args.full else 'quick'}   backends: {','.join(args.backends)}   "
        f"postgres: {'yes' if dsn else 'no (' + NO_POSTGRES + ')'}",
        file=out,
        flush=True,
    )
    if scenarios is None:
        modules, missing = load_scenarios(args.only)
    else:
        modules, missing = list(scenarios), []
    for text in missing:
        print(f"note: {text}", file=out)
    workdir = Path(tempfile.mkdtemp(prefix="agentsession-reliability-"))
    config = Config(
        quick=not args.full,
        backends=args.backends,
        workdir=workdir,
        seed=seed,
        postgres_dsn=dsn,
    )

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, stop)
    # Recovery logs every repair at WARNING: thousands of lines here, where repairs are the
    # point. The checks, not the log, decide the outcome.
    library_log = logging.getLogger("agentsession")
    log_level = library_log.level
    library_log.setLevel(logging.ERROR)
    started = time.monotonic()
    try:
        results = run_scenarios(config, modules, progress=sys.stderr)
    finally:
        kill_all()
        shutil.rmtree(workdir, ignore_errors=True)
        if dsn and "postgres" in args.backends:
            _drop_leftover_schemas(dsn)
        for number, handler in previous.items():
            signal.signal(number, handler)
        library_log.setLevel(log_level)
    took = time.monotonic() - started
    print("", file=out)
    code = report(results, out)
    print(f"took {took:.1f} s; seed {seed}; reproduce: {_reproduce(argv, seed)}", file=out)
    if args.json:
        payload = {
            "command": ["python", "reliability/run.py", *argv],
            "seed": seed,
            "mode": "full" if args.full else "quick",
            "seconds": round(took, 1),
            "missing": missing,
            "exit_code": code,
            "rows": to_json(results),
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
