"""The sessions page of a store that keeps a catalog, in a real browser (Debian's chromium
through Selenium, as ``tests/test_web_browser.py``): the catalog's filters, "more sessions"
(the next page by cursor), and the search box, whose hits link to the event in its session.

The viewer serves a memory store (its catalog is the reference) with uvicorn in a thread on a
free loopback port, started and stopped by the module's fixture; skipped, saying why, without
chromium and chromedriver.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("starlette", reason="the viewer needs the web extra")
pytest.importorskip("selenium.webdriver", reason="the browser tests need selenium")

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

import agentsession as ags
from agentsession.backends.memory import MemoryStore
from agentsession.web import create_app

from .catalog_store import fill
from .test_web import PAYLOADS, Server
from .test_web_browser import (
    assert_nothing_ran,
    browser,
    loaded,
    pytestmark,
    shot,
    wait,
)

__all__ = ["browser", "pytestmark"]  # the module's browser, and its skip without chromium

FILLERS = 45
"""Sessions besides ``fill``'s 13, so that the catalog has more than a page (50)."""


@pytest.fixture(scope="module")
def store() -> Iterator[ags.BaseStore]:
    opened = MemoryStore()
    for n in range(FILLERS):
        opened.get(f"filler:{n:02d}").append(
            ags.Event.new("user/message", ags.Message.user(f"filler {n}"))
        )
    fill(opened)
    with opened.get("xss:walrus").turn(agent="coder") as turn:
        turn.user("walrus " + " ".join(PAYLOADS))
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def base_url(store: ags.BaseStore) -> Iterator[str]:
    with Server(create_app(store)) as server:
        yield server.url + "/"


def listed(driver: WebDriver) -> list[str]:
    """The ids of the rows shown (read in one script: the list is redrawn as it loads)."""
    return list(driver.execute_script(
        "return [...document.querySelectorAll('#session-rows tr')].map(r => r.dataset.sessionId)"
    ))


def hit_keys(driver: WebDriver) -> list[tuple[str, int]]:
    """``(session id, seq)`` of the hits shown."""
    found = driver.execute_script(
        "return [...document.querySelectorAll('#hits li')]"
        ".map(li => [li.dataset.sessionId, Number(li.dataset.seq)])"
    )
    return [(str(sid), int(seq)) for sid, seq in found]


def test_the_catalog_pages_with_more_and_filters(
    browser: WebDriver, base_url: str, store: ags.BaseStore
) -> None:
    everything = [info.id for info in store.list(where={})]
    browser.get(base_url)
    wait(browser, lambda d: d.find_element(By.ID, "catalog-filters").is_displayed())
    wait(browser, lambda d: listed(d) == everything[:50])
    assert not browser.find_element(By.ID, "prev").is_displayed()  # no offset pages
    more = browser.find_element(By.ID, "more-sessions")
    assert more.is_displayed()
    more.click()
    wait(browser, lambda d: listed(d) == everything)
    assert not more.is_displayed()
    first = browser.find_element(By.CSS_SELECTOR, "#session-rows tr[data-session-id='chat:00']")
    assert "The first session" in first.text and "billing" in first.text
    # A filter by status: the session whose turn nobody finishes.
    Select(browser.find_element(By.ID, "status")).select_by_value("needs_recovery")
    wait(browser, lambda d: listed(d) == ["chat:open"])
    assert "needs recovery" in browser.find_element(By.ID, "session-rows").text
    assert "status=needs_recovery" in browser.current_url
    Select(browser.find_element(By.ID, "status")).select_by_value("")
    # Tenant and tag together, then an agent.
    browser.find_element(By.ID, "tenant").send_keys("acme")
    browser.find_element(By.ID, "tag").send_keys("billing")
    expected = [i.id for i in store.list(where={"tenant": "acme", "tags": ["billing"]})]
    wait(browser, lambda d: listed(d) == expected)
    assert len(expected) == 2
    shot(browser, "catalog-filtered")
    browser.find_element(By.ID, "tag").clear()
    browser.find_element(By.ID, "agent").send_keys("coder")
    expected = [i.id for i in store.list(where={"tenant": "acme", "agent": "coder"})]
    wait(browser, lambda d: listed(d) == expected or (not expected and d.find_element(
        By.ID, "empty").is_displayed()))
    # Kept in the address: a reload shows the same filters.
    browser.refresh()
    wait(browser, lambda d: d.find_element(By.ID, "tenant").get_attribute("value") == "acme")
    wait(browser, lambda d: listed(d) == expected or d.find_element(By.ID, "empty").is_displayed())


def test_the_search_box_lists_hits_that_open_the_session_at_the_event(
    browser: WebDriver, base_url: str, store: ags.BaseStore
) -> None:
    browser.get(base_url)
    box = wait(browser, lambda d: d.find_element(By.ID, "search")
               if d.find_element(By.ID, "search-form").is_displayed() else None)
    box.send_keys("deploy production")
    expected = [(h.session_id, h.seq) for h in store.search("deploy production")]
    wait(browser, lambda d: hit_keys(d) == expected)
    assert not browser.find_element(By.ID, "sessions").is_displayed()
    marks = {m.text for m in browser.find_elements(By.CSS_SELECTOR, "#hits mark")}
    assert marks == {"deploy", "production"}
    assert "search=deploy+production" in browser.current_url
    assert not browser.find_element(By.ID, "more-hits").is_displayed()  # 12 hits: one page
    # Another query, of more hits than a page (20), and the next page.
    box.clear()
    box.send_keys("build")
    expected = [(h.session_id, h.seq) for h in store.search("build")]
    wait(browser, lambda d: hit_keys(d) == expected)
    browser.find_element(By.ID, "more-hits").click()
    expected = [(h.session_id, h.seq) for h in store.search("build", limit=100)]
    wait(browser, lambda d: hit_keys(d) == expected)
    assert len(expected) == 24 and not browser.find_element(By.ID, "more-hits").is_displayed()
    # The filters apply to the search too.
    box.clear()
    box.send_keys("deploy production")
    browser.find_element(By.ID, "tenant").send_keys("globex")
    expected = [(h.session_id, h.seq) for h in store.search(
        "deploy production", where={"tenant": "globex"})]
    wait(browser, lambda d: hit_keys(d) == expected)
    shot(browser, "catalog-search")
    # A hit opens its session at its event.
    def open_hit(driver: WebDriver) -> int | None:
        # The list may be drawn once more (a late answer to an earlier keystroke): try again.
        try:
            target = driver.find_element(By.CSS_SELECTOR, "#hits li[data-session-id='chat:05'] a")
            seq = int(str(target.find_element(By.XPATH, "..").get_attribute("data-seq")))
            target.click()
        except StaleElementReferenceException:
            return None
        return seq

    seq = wait(browser, open_hit)
    wait(browser, lambda d: "session?id=chat%3A05" in d.current_url and loaded(d))
    shown = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".target"))
    assert shown.get_attribute("id") == f"seq-{seq}"
    # Back: the search, kept in the address, is shown again.
    browser.back()
    wait(browser, lambda d: d.find_element(By.ID, "search").get_attribute("value")
         == "deploy production" and len(hit_keys(d)) > 0)
    # An emptied box shows the list again.
    browser.find_element(By.ID, "search").clear()
    browser.find_element(By.ID, "search").send_keys(" ")
    wait(browser, lambda d: d.find_element(By.ID, "sessions").is_displayed())


def test_stored_text_in_hits_stays_text(browser: WebDriver, base_url: str) -> None:
    browser.get(base_url + "?search=walrus")
    wait(browser, lambda d: hit_keys(d) == [("xss:walrus", 2)])
    snippet = browser.find_element(By.CSS_SELECTOR, "#hits .snippet").text
    assert "walrus" in snippet and "<script>" in snippet
    assert_nothing_ran(browser)
