"""``agentsession serve`` in a real browser: Debian's chromium, driven by Selenium through
chromium-driver, against ``agentsession serve`` started on a free loopback port in a process of
its own (one server and one browser for the module; both stopped at its end).

The store is the demo's (a recovered session, a compacted one, a subagent's child session)
plus a session full of XSS payloads. Screenshots go to ``test-artifacts/`` (not committed).
``.ci/run`` installs chromium and chromium-driver, so these tests run in CI; elsewhere they
are skipped when either is missing.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("starlette", reason="the viewer needs the web extra")
webdriver = pytest.importorskip("selenium.webdriver", reason="the browser tests need selenium")

from rich.console import Console  # noqa: E402
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

import agentsession as ags  # noqa: E402
from agentsession.demo import run_demo  # noqa: E402

from .test_web import (  # noqa: E402
    PAYLOADS,
    XSS,
    XSS_ID,
    append_from_another_process,
    create_again_from_another_process,
    run_serve,
    stop,
)

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


CHROMIUM = _find("chromium", "chromium-browser", "google-chrome")
DRIVER = _find("chromedriver", "chromium-driver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="no chromium and chromedriver on PATH (Debian: apt-get install chromium "
    "chromium-driver; .ci/run installs them)",
)


def add_xss_session(store: ags.BaseStore) -> None:
    """A session whose id, messages, tool arguments, results and links are XSS payloads."""
    session = store.get(XSS_ID)
    with session.turn(agent=f"<b>{XSS}</b>", user=PAYLOADS[1]) as turn:
        turn.user("\n\n".join(PAYLOADS))
        with turn.step() as step:
            call = ags.ToolCall(id=PAYLOADS[0], name=PAYLOADS[1], arguments={"a": list(PAYLOADS)})
            step.assistant("\n\n".join(PAYLOADS), tool_calls=[call])
            step.tool_call(call)
            step.tool_result(PAYLOADS[0], PAYLOADS[1], "\n".join(PAYLOADS))
            step.subagent_start(XSS_ID, XSS_ID, task=PAYLOADS[3])
        turn.assistant(f"see {PAYLOADS[2]}")


INTEGRATION_ID = "oa:helper"
"""A session as the OpenAI Agents SDK integration writes it: each item as an
``openai_agents/item`` event, followed by its typed mirror, and usage without turn markers."""


def add_integration_session(store: ags.BaseStore) -> None:
    answer = {"type": "message", "role": "assistant", "id": "m1", "status": "completed",
              "content": [{"type": "output_text", "text": "4", "annotations": []}]}
    store.get(INTEGRATION_ID).append_many(
        [
            ags.Event.new("openai_agents/item", {"role": "user", "content": "What is 2+2?"}),
            ags.Event.new("user/message", ags.Message.user("What is 2+2?")),
            ags.Event.new("openai_agents/item", answer),
            ags.Event.new("assistant/message", ags.Message.assistant("4")),
            ags.Event.new("usage", ags.events.Usage(input_tokens=859, output_tokens=80,
                                                    cache_read_tokens=256)),
            ags.Event.new("openai_agents/item", {"role": "user", "content": "Thanks"}),
            ags.Event.new("user/message", ags.Message.user("Thanks")),
        ]
    )


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("web") / "agentsession-demo"
    run_demo(directory, Console(quiet=True))
    store = ags.open_store(directory)
    add_xss_session(store)
    add_integration_session(store)
    store.close()
    return directory


@pytest.fixture(scope="module")
def base_url(store_dir: Path) -> Iterator[str]:
    """``agentsession serve`` on a free loopback port, for the whole module."""
    process, announced = run_serve(["--port", "0"], str(store_dir))
    try:
        yield announced["url"]
    finally:
        stop(process)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,900", "--lang=en-US"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: WebDriver, condition: Callable[[WebDriver], Any], timeout: float = 15) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition)


def shot(driver: WebDriver, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def loaded(driver: WebDriver) -> bool:
    """Whether the transcript page has shown its first page of rows."""
    return bool(driver.execute_script("return document.getElementById('rows').dataset.loaded"))


def session_row(driver: WebDriver, session_id: str) -> WebElement:
    for row in driver.find_elements(By.CSS_SELECTOR, "#session-rows tr"):
        if row.get_attribute("data-session-id") == session_id:
            return row
    raise AssertionError(f"{session_id} is not listed")


def assert_nothing_ran(driver: WebDriver) -> None:
    assert driver.execute_script("return typeof window.__xss") == "undefined"
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018
    assert driver.execute_script("return document.scripts.length") == 1
    hrefs = driver.execute_script(
        "return [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))"
    )
    for href in hrefs:
        assert href.startswith(("./", "session?id=", "https://", "http://", "mailto:")), href
    assert driver.execute_script("return document.querySelectorAll('img, iframe, svg[onload]')"
                                 ".length") == 0


def test_the_sessions_list(browser: WebDriver, base_url: str) -> None:
    browser.get(base_url)
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#session-rows tr")) == 7)
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#session-rows .pending"))
    assert "recovered" in session_row(browser, "slack:C002").text
    assert "compacted" in session_row(browser, "slack:C001:t:1712345678.9").text
    assert "1 child" in session_row(browser, "cli:demo").text
    assert "child of cli:demo" in session_row(browser, "cli:demo:child:researcher").text
    assert session_row(browser, "cli:demo").find_elements(By.CSS_SELECTOR, "td")[1].text == "10"
    shot(browser, "sessions")
    box = browser.find_element(By.ID, "q")
    box.send_keys("C00")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#session-rows tr")) == 3)
    box.clear()
    box.send_keys("nothing-like-this")
    wait(browser, lambda d: d.find_element(By.ID, "empty").is_displayed())


def test_the_sessions_list_shows_a_session_another_store_object_creates(
    browser: WebDriver, base_url: str, store_dir: Path
) -> None:
    browser.get(base_url + "?q=live-list")
    wait(browser, lambda d: d.find_element(By.ID, "empty").is_displayed()
         and d.find_element(By.ID, "live").text == "● live")
    browser.execute_script("window.__same_page = true")
    store = ags.open_store(store_dir, create=False)
    try:
        with store.get("live-list:new").turn(agent="other") as turn:
            turn.user("created while the list is shown")
        # No reload of the page: the feed's change reloads the list, filter kept.
        row = wait(browser, lambda d: session_row(d, "live-list:new")
                   if d.find_elements(By.CSS_SELECTOR, "#session-rows tr") else None)
        assert row.find_elements(By.CSS_SELECTOR, "td")[1].text == "3"
        assert len(browser.find_elements(By.CSS_SELECTOR, "#session-rows tr")) == 1
        assert browser.find_element(By.ID, "q").get_attribute("value") == "live-list"
        shot(browser, "sessions-live")
        store.delete("live-list:new")  # (the other tests count the demo's sessions)
        wait(browser, lambda d: d.find_element(By.ID, "empty").is_displayed())
        assert browser.execute_script("return window.__same_page") is True
    finally:
        store.close()


def test_the_recovered_session_and_a_step_expanded(browser: WebDriver, base_url: str) -> None:
    browser.get(base_url)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#session-rows tr"))
    session_row(browser, "slack:C002").find_element(By.TAG_NAME, "a").click()
    wait(browser, lambda d: "session?id=slack%3AC002" in d.current_url and loaded(d))
    banner = browser.find_element(By.CSS_SELECTOR, ".banner.recovery")
    assert "RECOVERY" in banner.text and "cut off" in banner.text
    result = browser.find_element(By.ID, "seq-7")
    assert not result.is_displayed()  # inside the first step, collapsed
    step = browser.find_element(By.CSS_SELECTOR, "details.step > summary")
    assert "slow_deploy" in step.text
    step.click()
    wait(browser, lambda d: d.find_element(By.ID, "seq-7").is_displayed())
    assert "decision=interrupted" in result.text
    # The result sits under the call it answers, whose arguments are pretty-printed.
    call = browser.find_element(By.CSS_SELECTOR, ".call[data-call-id='call_001']")
    assert '"target": "production"' in call.text and "interrupted" in call.text
    # The stored event, on demand.
    result.find_element(By.CSS_SELECTOR, "button.seq").click()
    raw = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#seq-7 pre.raw"))
    wait(browser, lambda d: '"tool/result"' in raw.text)
    assert wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#tokens-chart svg rect"))
    shot(browser, "recovered-session")
    # What the model sees: the interrupted call's stand-in result is part of the history.
    browser.find_element(By.ID, "view-model").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#messages .msg")) >= 4)
    assert "decision=interrupted" in browser.find_element(By.ID, "messages").text
    assert not browser.find_element(By.ID, "rows").is_displayed()
    browser.find_element(By.ID, "view-stored").click()
    assert browser.find_element(By.ID, "rows").is_displayed()


def test_following_the_subagent_link_and_back(browser: WebDriver, base_url: str) -> None:
    browser.get(base_url + "session?id=cli%3Ademo")
    wait(browser, loaded)
    link = browser.find_element(By.CSS_SELECTOR, ".row.subagent_start a")
    assert link.text == "cli:demo:child:researcher"
    link.click()
    wait(browser, lambda d: "child%3Aresearcher" in d.current_url and loaded(d))
    fork = browser.find_element(By.CSS_SELECTOR, ".banner.fork")
    assert "child of session cli:demo" in fork.text
    assert "child of session cli:demo" in browser.find_element(By.ID, "parent").text
    fork.find_element(By.TAG_NAME, "a").click()
    wait(browser, lambda d: d.current_url.endswith("session?id=cli%3Ademo#seq-7") and loaded(d))
    target = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".target"))
    assert target.get_attribute("id") == "seq-7"
    assert "cli:demo:child:researcher" in browser.find_element(By.ID, "children").text


def test_the_live_tail_shows_an_event_another_process_appends(
    browser: WebDriver, base_url: str, store_dir: Path
) -> None:
    browser.get(base_url + "session?id=slack%3AC002")
    wait(browser, lambda d: loaded(d) and "live" in d.find_element(By.ID, "live").text
         and "connecting" not in d.find_element(By.ID, "live").text)
    before = len(browser.find_elements(By.CSS_SELECTOR, "details.turn"))
    store = ags.open_store(store_dir, create=False)
    events = store.open("slack:C002").latest_seq
    store.close()
    text = "appended by <i>another</i> process"
    append_from_another_process(str(store_dir), "slack:C002", text)  # 3 events: a whole turn
    wait(browser, lambda d: text in d.find_element(By.ID, "rows").text)
    assert len(browser.find_elements(By.CSS_SELECTOR, "details.turn")) == before + 1
    shown = f"{events + 3} of {events + 3} events shown"
    wait(browser, lambda d: d.find_element(By.ID, "progress").text == shown)
    shot(browser, "live-tail")


def test_xss_payloads_are_inert(browser: WebDriver, base_url: str) -> None:
    browser.get(base_url)
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#session-rows tr")) >= 5)
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#session-rows .pending"))
    assert_nothing_ran(browser)
    assert session_row(browser, XSS_ID).find_element(By.TAG_NAME, "a").text == XSS_ID
    session_row(browser, XSS_ID).find_element(By.TAG_NAME, "a").click()
    wait(browser, loaded)
    assert browser.find_element(By.ID, "title").text == XSS_ID
    browser.find_element(By.ID, "expand").click()
    for details in browser.find_elements(By.CSS_SELECTOR, "details.fold, details.thinking"):
        browser.execute_script("arguments[0].open = true", details)
    text = browser.find_element(By.ID, "rows").text
    for payload in PAYLOADS:
        assert payload in text, payload  # shown as text
    browser.find_element(By.CSS_SELECTOR, "button.seq").click()
    browser.find_element(By.ID, "view-model").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#messages .msg"))
    assert PAYLOADS[0] in browser.find_element(By.ID, "messages").text
    assert_nothing_ran(browser)
    shot(browser, "xss-inert")


def rows_text(driver: WebDriver) -> str:
    return str(driver.find_element(By.ID, "rows").text)


def test_the_live_tail_shows_a_session_deleted_and_created_again(
    browser: WebDriver, base_url: str, store_dir: Path
) -> None:
    sid = "live:again"
    store = ags.open_store(store_dir, create=False)
    try:
        with store.get(sid).turn(agent="coder") as turn:
            turn.user("old life one")
        with store.get(sid).turn(agent="coder") as turn:
            turn.user("old life two")
        browser.get(base_url + "session?id=live%3Aagain")
        wait(browser, lambda d: loaded(d) and "● live" in d.find_element(By.ID, "live").text)
        assert "old life two" in rows_text(browser)
        # Created again by another process, longer than the life the page shows: the page
        # shows the new life from its first event, and nothing of the old one.
        new = ["new life first", "new life second", "new life third"]
        create_again_from_another_process(str(store_dir), sid, new)
        wait(browser, lambda d: all(text in rows_text(d) for text in new))
        assert "old life" not in rows_text(browser)
        wait(browser, lambda d: d.find_element(By.ID, "progress").text == "9 of 9 events shown")
        assert len(browser.find_elements(By.CSS_SELECTOR, "details.turn")) == 3
        # The live tail goes on in the new life.
        wait(browser, lambda d: "● live" in d.find_element(By.ID, "live").text)
        append_from_another_process(str(store_dir), sid, "appended to the new life")
        wait(browser, lambda d: "appended to the new life" in rows_text(d))
        wait(browser, lambda d: d.find_element(By.ID, "progress").text == "12 of 12 events shown")
        shot(browser, "live-tail-created-again")
        # Deleted: the page says it waits; created again later: the page shows it.
        store.delete(sid)
        wait(browser, lambda d: "waiting" in d.find_element(By.ID, "live").text)
        create_again_from_another_process(str(store_dir), sid, ["third life"])
        wait(browser, lambda d: "third life" in rows_text(d))
        assert "new life" not in rows_text(browser)
        wait(browser, lambda d: d.find_element(By.ID, "progress").text == "3 of 3 events shown")
        wait(browser, lambda d: "● live" in d.find_element(By.ID, "live").text)
        assert not browser.find_element(By.ID, "error").is_displayed()
    finally:
        store.delete(sid)
        store.close()


def shown_seqs(driver: WebDriver) -> list[int]:
    """The seqs of the rows the transcript shows, in page order, repeats included."""
    ids: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#rows [id^=\"seq-\"]')].map(n => n.id)")
    return [int(ident[4:]) for ident in ids]


def test_the_live_tail_resumes_after_the_server_restarts_without_repeating_a_row(
    browser: WebDriver, store_dir: Path
) -> None:
    sid = "live:resume"
    store = ags.open_store(store_dir, create=False)
    with store.get(sid).turn(agent="coder") as turn:
        turn.user("before the page")
    store.close()
    process, announced = run_serve(["--port", "0"], str(store_dir))
    port = announced["port"]
    try:
        browser.get(announced["url"] + "session?id=live%3Aresume")
        wait(browser, lambda d: loaded(d) and "● live" in d.find_element(By.ID, "live").text)
        append_from_another_process(str(store_dir), sid, "while served")
        wait(browser, lambda d: "while served" in rows_text(d))
        # A mark on a row shown: a page that loaded itself anew would lose it.
        browser.execute_script("document.getElementById('seq-1').dataset.kept = 'yes'")
        # The charts refresh 1.5 s after a turn ends: let that be done before the server goes
        # (a refresh that fails shows its error, which is not what this test is about).
        time.sleep(2)
        # The stream is cut: the server stops; events are appended while it is away.
        stop(process)
        wait(browser, lambda d: "reconnecting" in d.find_element(By.ID, "live").text)
        for text in ("while away 1", "while away 2"):
            append_from_another_process(str(store_dir), sid, text)
        process, _ = run_serve(["--port", str(port)], str(store_dir))
        # The EventSource reconnects by itself, resuming after the last id it saw.
        wait(browser, lambda d: "while away 2" in rows_text(d), timeout=30)
        wait(browser, lambda d: "● live" in d.find_element(By.ID, "live").text)
        append_from_another_process(str(store_dir), sid, "after the restart")
        wait(browser, lambda d: "after the restart" in rows_text(d))
        assert shown_seqs(browser) == list(range(1, 16))
        assert browser.execute_script(
            "return document.getElementById('seq-1').dataset.kept") == "yes"
        wait(browser, lambda d: d.find_element(By.ID, "progress").text == "15 of 15 events shown")
        error = browser.find_element(By.ID, "error")
        assert not error.is_displayed(), error.text
        shot(browser, "live-tail-resumed")
    finally:
        stop(process)
        store = ags.open_store(store_dir, create=False)
        store.delete(sid)
        store.close()


def listed(driver: WebDriver) -> list[str]:
    """The ids the sessions page lists (read at once: the page redraws as the filter changes)."""
    ids: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#session-rows tr')].map(r => r.dataset.sessionId)")
    return ids


def test_the_agent_filter_finds_the_agents_named_in_events(
    browser: WebDriver, base_url: str
) -> None:
    """No demo session's record names an agent; their events name demo-coder."""
    browser.get(base_url)
    wait(browser, lambda d: len(listed(d)) == 7)
    box = browser.find_element(By.ID, "agent")
    box.send_keys("demo-coder")
    wait(browser, lambda d: sorted(listed(d)) == ["cli:demo", "slack:C001:t:1712345678.9",
                                                  "slack:C002", "slack:C003:t:1712350000.1"])
    box.clear()
    box.send_keys("researcher")
    wait(browser, lambda d: listed(d) == ["cli:demo:child:researcher"])


def chart_bars(driver: WebDriver) -> list[dict[str, Any]]:
    """Each bar of the tokens chart: its hover text and the heights of its segments."""
    bars: list[dict[str, Any]] = driver.execute_script(
        "return [...document.querySelectorAll('#tokens-chart g.bar')].map(g => ({"
        "title: g.querySelector('title').textContent,"
        "heights: [...g.querySelectorAll('rect')].map(r => Number(r.getAttribute('height')))}))"
    )
    return bars


def test_the_tokens_chart_counts_cache_reads_inside_input_and_groups_by_message(
    browser: WebDriver, base_url: str
) -> None:
    """859 in (256 of them cached) + 80 out is a bar of 939 tokens, not 1,195; a session
    without turn markers has its usage grouped by user message."""
    browser.get(base_url + "session?id=oa%3Ahelper")
    wait(browser, lambda d: loaded(d) and chart_bars(d))
    chart = browser.find_element(By.ID, "tokens-chart")
    assert chart.find_element(By.TAG_NAME, "figcaption").text == "tokens per message"
    top = browser.execute_script(
        "return document.querySelector('#tokens-chart svg text').textContent")
    assert top == "939"
    first, second = chart_bars(browser)
    assert first["title"].startswith("message 1 (seq 2): 859 in (256 cache read")
    assert "80 out" in first["title"]
    # The tallest bar fills the plot (118 px): uncached 603, cache read 256 and output 80.
    assert abs(sum(first["heights"]) - 118) < 1.5
    assert [round(h) for h in first["heights"]] == [round(118 * n / 939) for n in (603, 256, 80)]
    assert second["heights"] == []  # the second message had no usage
    assert "2 messages" in chart.find_element(By.CSS_SELECTOR, ".legend").text
    shot(browser, "tokens-by-message")


def test_a_session_without_usage_says_so(browser: WebDriver, base_url: str) -> None:
    browser.get(base_url + "session?id=" + quote(XSS_ID, safe=""))
    wait(browser, lambda d: loaded(d) and d.find_elements(By.CSS_SELECTOR, "#tokens-chart .none"))
    chart = browser.find_element(By.ID, "tokens-chart")
    assert chart.find_element(By.CSS_SELECTOR, ".none").text == "no usage recorded"
    assert not chart.find_elements(By.TAG_NAME, "svg")


def test_an_interrupted_call_is_marked_not_timed(browser: WebDriver, base_url: str) -> None:
    browser.get(base_url + "session?id=slack%3AC002")
    wait(browser, lambda d: loaded(d) and d.find_elements(By.CSS_SELECTOR, "#tools-chart svg"))
    took = browser.execute_script(
        "return [...document.querySelectorAll('.call .took')].map(t => t.textContent)")
    assert took[0] == "interrupted"  # call_001, cut off by the crash
    assert took[1].startswith("took ")  # call_008, run again after the repair
    assert browser.find_element(By.CSS_SELECTOR, ".call[data-call-id='call_001'] .took"
                                ).get_attribute("class") == "took interrupted"
    tools = browser.find_element(By.ID, "tools-chart")
    assert "1 call · 1 interrupted, not timed" in tools.find_element(By.CSS_SELECTOR,
                                                                     ".legend").text
    assert len(tools.find_elements(By.CSS_SELECTOR, "g.bar")) == 1


def test_a_merged_summary_is_labelled_with_its_author(browser: WebDriver, base_url: str) -> None:
    browser.get(base_url + "session?id=cli%3Ademo")
    wait(browser, loaded)
    row = browser.find_element(By.ID, "seq-9")
    assert row.find_element(By.CSS_SELECTOR, ".label").text == "assistant"
    assert row.find_element(By.CSS_SELECTOR, ".agent").text == "(researcher)"


def test_integration_records_are_hidden_behind_a_toggle(
    browser: WebDriver, base_url: str
) -> None:
    browser.get(base_url + "session?id=oa%3Ahelper")
    wait(browser, loaded)
    items = browser.find_elements(By.CSS_SELECTOR, ".row.integration")
    assert [i.get_attribute("id") for i in items] == ["seq-1", "seq-3", "seq-6"]
    assert not any(i.is_displayed() for i in items)
    typed = [r.text for r in browser.find_elements(By.CSS_SELECTOR, ".row.user_message, "
                                                   ".row.assistant_message")]
    assert [t.split("\n")[-1] for t in typed] == ["What is 2+2?", "4", "Thanks"]
    toggle = browser.find_element(By.ID, "integration")
    assert toggle.is_displayed() and toggle.text == "show 3 integration records"
    toggle.click()
    wait(browser, lambda d: all(i.is_displayed() for i in items))
    assert toggle.text == "hide 3 integration records"
    # A question's record and an answer's are folded alike.
    for item in items:
        fold = item.find_element(By.CSS_SELECTOR, "details.fold")
        assert fold.get_attribute("open") is None
        assert "openai_agents/item" in item.text
    shot(browser, "integration-records")
    toggle.click()
    wait(browser, lambda d: not any(i.is_displayed() for i in items))
    # A session without integration records has no toggle.
    browser.get(base_url + "session?id=cli%3Ademo")
    wait(browser, loaded)
    assert not browser.find_element(By.ID, "integration").is_displayed()


def test_rewound_rows_are_greyed_and_left_out_of_what_the_model_sees(
    browser: WebDriver, base_url: str, store_dir: Path
) -> None:
    sid = "rw:retried"
    store = ags.open_store(store_dir, create=False)
    try:
        session = store.get(sid)
        for i in range(3):  # turns at seqs 1-4, 5-8, 9-12
            with session.turn(agent="coder") as turn:
                turn.user(f"question {i}")
                turn.assistant(f"answer {i}")
        session.rewind(to_turn=6, reason="wrong path")  # 13: back to seq 8
        with session.retry(agent="coder") as turn:  # 14: back to seq 4; the turn 15-18
            turn.assistant("answer 1 again")
        browser.get(base_url + "session?id=" + quote(sid, safe=""))
        wait(browser, lambda d: loaded(d) and "live" in d.find_element(By.ID, "live").text
             and "connecting" not in d.find_element(By.ID, "live").text)

        def greyed(d: WebDriver) -> list[int]:
            found = d.execute_script(
                "return [...document.querySelectorAll('#rows .rewound')]"
                ".map(n => Number(n.id.slice(4)))"
            )
            return sorted(found)

        assert greyed(browser) == [*range(5, 14)]
        turn = browser.find_element(By.ID, "seq-5")
        assert turn.tag_name == "details" and "rewound" in turn.text  # the turn's summary
        assert float(turn.value_of_css_property("opacity")) < 1
        row = browser.find_element(By.ID, "seq-6")
        assert "question 1" in row.text and row.is_displayed()  # greyed, still readable
        assert float(row.value_of_css_property("opacity")) == 1  # not greyed twice
        marker = browser.find_element(By.CSS_SELECTOR, "#seq-14 .banner.rewind")
        assert "REWIND" in marker.text and "retry" in marker.text
        assert "history back to seq 4" in marker.text
        assert "wrong path" in browser.find_element(By.ID, "seq-13").text
        assert float(browser.find_element(By.ID, "seq-14").value_of_css_property("opacity")) == 1
        shot(browser, "rewound-rows")
        # A rewind appended now, to right after the first marker, undoes the retry: the page
        # greys and brings back the rows it had shown.
        session.rewind(to_seq=13)
        wait(browser, lambda d: greyed(d) == [*range(9, 13), *range(14, 19)])
        # What the model sees leaves every rewound row out.
        browser.find_element(By.ID, "view-model").click()
        wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#messages .msg")) == 4)
        shown = browser.find_element(By.ID, "messages").text
        assert "question 0" in shown and "answer 1" in shown
        assert "question 2" not in shown and "answer 1 again" not in shown
        browser.find_element(By.ID, "view-stored").click()
    finally:
        store.delete(sid)
        store.close()


def test_a_session_with_branches_shows_a_switcher_that_opens_them(
    browser: WebDriver, base_url: str, store_dir: Path
) -> None:
    store = ags.open_store(store_dir, create=False)
    try:
        origin = store.get("br:origin")
        for i in range(2):  # turns at seqs 1-4 and 5-8
            with origin.turn(agent="coder") as turn:
                turn.user(f"question {i}")
                turn.assistant(f"answer {i}")
        first = origin.branch(at_seq=4, id="br:first")
        with first.turn(agent="coder") as turn:  # seqs 6-9, after the marker at 5
            turn.user("asked only in the first branch")
            turn.assistant("answered only in the first branch")
        origin.branch(id="br:second")
        browser.get(base_url + "session?id=" + quote("br:origin", safe=""))
        wait(browser, loaded)
        switcher = browser.find_element(By.ID, "branching")
        assert switcher.is_displayed() and "2 branches" in switcher.text
        choice = Select(browser.find_element(By.ID, "branch"))
        assert [o.text for o in choice.options] == [
            "this session: br:origin", "br:first (from seq 4)", "br:second (from seq 8)"
        ]
        assert choice.first_selected_option.text == "this session: br:origin"
        # The rows where a branch leaves say so.
        assert "branch br:first leaves here" in browser.find_element(By.ID, "seq-4").text
        assert "branch br:second leaves here" in browser.find_element(By.ID, "seq-8").text
        shot(browser, "branch-switcher")
        choice.select_by_visible_text("br:first (from seq 4)")
        wait(browser, lambda d: "id=br%3Afirst" in d.current_url and loaded(d))
        assert browser.find_element(By.ID, "title").text == "br:first"
        own = browser.find_element(By.ID, "seq-7")
        assert "asked only in the first branch" in own.text and own.is_displayed()
        banner = browser.find_element(By.CSS_SELECTOR, "#seq-5 .banner.branch")
        assert "BRANCH" in banner.text and "of session br:origin at its seq 4" in banner.text
        assert "question 0" in browser.find_element(By.ID, "seq-2").text  # shared
        assert not browser.find_elements(By.ID, "seq-10")  # the origin's second turn is not
        assert "question 1" not in browser.find_element(By.ID, "rows").text
        back = Select(browser.find_element(By.ID, "branch"))
        assert [o.text for o in back.options] == [
            "this session: br:first", "origin: br:origin at seq 4"
        ]
        assert "a branch" in browser.find_element(By.ID, "branching").text
        shot(browser, "branch-transcript")
        assert_nothing_ran(browser)
        # A session without branches shows no switcher.
        browser.get(base_url + "session?id=cli%3Ademo")
        wait(browser, loaded)
        assert not browser.find_element(By.ID, "branching").is_displayed()
        assert not browser.find_elements(By.ID, "branch")
    finally:
        store.delete("br:origin", recursive=True)
        store.close()
