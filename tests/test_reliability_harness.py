"""The fault-injection harness (``reliability/run.py``): its table and exit code, and one run of
the whole CI configuration (``--quick``) as CI runs it."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from reliability import run  # noqa: E402
from reliability.common import Config, Result  # noqa: E402

POSTGRES_ENV = "AGENTSESSION_TEST_POSTGRES_DSN"


class FakeScenario:
    """A scenario module stand-in that returns the rows it is given."""

    def __init__(self, name: str, rows: list[Result] | None = None, error: bool = False) -> None:
        self.NAME = name
        self.TITLE = f"fake {name}"
        self.rows = rows if rows is not None else []
        self.error = error
        self.configs: list[Config] = []

    def run(self, config: Config) -> list[Result]:
        self.configs.append(config)
        if self.error:
            raise RuntimeError("the scenario broke")
        return list(self.rows)


def ok_row(name: str = "fake", backend: str = "jsonl-flush") -> Result:
    return Result(scenario=name, backend=backend, trials=3, acknowledged=10, found=10)


@pytest.mark.parametrize(
    "change",
    [
        {"lost": 1},
        {"duplicated": 1},
        {"unopenable": 1},
        {"invalid": 1},
        {"uncaught": 1},
        {"violations": 1},
        {"errors": 1, "expected_errors": False},
    ],
)
def test_any_bad_count_fails_the_row_and_the_run(change: dict[str, object]) -> None:
    bad = ok_row()
    for name, value in change.items():
        setattr(bad, name, value)
    assert not bad.ok and bad.outcome == "FAIL"
    assert run.exit_code([ok_row(), bad]) == 1


def test_ok_skipped_and_expected_error_rows_pass() -> None:
    expected = ok_row()
    expected.errors = 4  # SessionErrors where the fault makes them expected
    skipped = Result(scenario="fake", backend="postgres", skipped="no server", lost=5)
    assert run.exit_code([ok_row(), expected, skipped]) == 0
    assert run.exit_code([]) == 0


def test_the_table_lists_every_row_with_its_columns_and_notes() -> None:
    bad = ok_row("broken", "sqlite")
    bad.lost = 2
    bad.notes.append("seq 7 is missing")
    skipped = Result(scenario="broken", backend="postgres", skipped="no server")
    out = io.StringIO()
    assert run.report([ok_row(), bad, skipped], out) == 1
    text = out.getvalue()
    header = text.splitlines()[0].split()
    assert header == [
        "scenario",
        "backend",
        "trials",
        "acknowledged",
        "found",
        "lost",
        "duplicated",
        "unopenable",
        "provider-invalid",
        "errors",
        "uncaught",
        "violations",
        "outcome",
    ]
    rows = [line.split() for line in text.splitlines()[2:5]]
    assert rows[0][0] == "fake" and rows[0][-1] == "ok"
    assert rows[1][:2] == ["broken", "sqlite"] and rows[1][5] == "2" and rows[1][-1] == "FAIL"
    assert rows[2][-1] == "skipped"
    assert "seq 7 is missing" in text and "skipped: no server" in text
    assert "FAIL: broken/sqlite" in text


def test_main_exits_non_zero_on_a_lost_event_and_writes_json(tmp_path: Path) -> None:
    lost = ok_row("fake")
    lost.lost = 1
    out = io.StringIO()
    target = tmp_path / "rows.json"
    code = run.main(
        ["--backends", "jsonl-flush", "--seed", "7", "--json", str(target)],
        scenarios=[FakeScenario("fake", [lost])],
        out=out,
    )
    assert code == 1
    text = out.getvalue()
    assert "seed: 7" in text and "--seed 7" in text
    payload = json.loads(target.read_text())
    assert payload["seed"] == 7 and payload["exit_code"] == 1
    assert payload["rows"][0]["lost"] == 1 and payload["rows"][0]["outcome"] == "FAIL"


def test_main_exits_zero_when_every_row_is_ok() -> None:
    scenario = FakeScenario("fake", [ok_row()])
    out = io.StringIO()
    assert (
        run.main(["--backends", "jsonl-flush", "--seed", "3"], scenarios=[scenario], out=out) == 0
    )
    [config] = scenario.configs
    assert config.quick and config.seed == 3 and config.backends == ("jsonl-flush",)
    assert not config.workdir.exists()  # the temporary workdir is removed


def test_a_scenario_that_raises_gets_a_failing_row() -> None:
    out = io.StringIO()
    code = run.main(
        ["--backends", "sqlite", "--full"],
        scenarios=[FakeScenario("boom", error=True), FakeScenario("fine", [ok_row("fine")])],
        out=out,
    )
    assert code == 1
    assert "the scenario raised RuntimeError: the scenario broke" in out.getvalue()
    assert "fine" in out.getvalue()


def test_postgres_rows_are_skipped_without_a_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POSTGRES_ENV, raising=False)
    scenario = FakeScenario("fake", [ok_row()])
    out = io.StringIO()
    code = run.main(["--backends", "sqlite,postgres"], scenarios=[scenario], out=out)
    assert code == 0
    assert scenario.configs[0].backends == ("sqlite",)
    assert f"skipped: {POSTGRES_ENV} is not set" in out.getvalue()


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as exc:
        run.main(["--backends", "oracle"], scenarios=[], out=io.StringIO())
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        run.main(["--only", "nope"], scenarios=[], out=io.StringIO())
    assert exc.value.code == 2


def test_scenarios_are_discovered_in_the_fixed_order() -> None:
    modules, missing = run.load_scenarios()
    names = [m.NAME for m in modules] + [text.split()[1].rstrip(":") for text in missing]
    assert sorted(names, key=run.SCENARIOS.index) == list(run.SCENARIOS)
    assert [m.NAME for m in modules] == [n for n in run.SCENARIOS if n in [m.NAME for m in modules]]
    only, _ = run.load_scenarios(["regressions", "process_kill"])
    assert [m.NAME for m in only] == ["process_kill", "regressions"]


@pytest.mark.slow
def test_the_quick_run_passes_and_lists_every_scenario(tmp_path: Path) -> None:
    """The CI configuration, end to end: every scenario, every backend (PostgreSQL when
    AGENTSESSION_TEST_POSTGRES_DSN is set; its rows are skipped otherwise). One test, so it runs
    once under ``pytest -n 2``; the harness uses its own temporary directory and PostgreSQL
    schemas named after its process id."""
    env = {k: v for k, v in os.environ.items() if k != POSTGRES_ENV}
    if os.environ.get(POSTGRES_ENV):
        env[POSTGRES_ENV] = os.environ[POSTGRES_ENV]
    rows_file = tmp_path / "rows.json"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "reliability" / "run.py"), "--quick", "--json", str(rows_file)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    report = f"stdout:\n{stdout}\nstderr (tail):\n{stderr[-3000:]}"
    assert proc.returncode == 0, report
    listed = {line.split()[0].split("/")[0] for line in stdout.splitlines() if line.strip()}
    for name in run.SCENARIOS:
        assert name in listed, f"{name} is not in the table\n{report}"
    rows = json.loads(rows_file.read_text())["rows"]
    assert rows and all(row["outcome"] in ("ok", "skipped") for row in rows)
    if not os.environ.get(POSTGRES_ENV):
        assert all(row["outcome"] == "skipped" for row in rows if row["backend"] == "postgres")
