"""Issue 32 in a real headless browser against ``sluice dev``: a queue's jobs page filters by state
and id prefix (the filter form, then the page's links), and a flow's tree links each job to its
page; the depth page draws its stacked layers. Skipped as tests/tooling/test_console_browser.py is
(no chromium, chromedriver or selenium). ``SLUICE_CONSOLE_SCREENSHOTS=docs/img`` saves the three
pages there (console-jobs.png, console-flow.png, console-depth.png: how docs/console.md's are made)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.stack.test_dev import http
from tests.tooling.test_console_browser import browser as browser  # the fixture
from tests.tooling.test_console_browser import click, logged_in, serve_console, text_of, wait_status

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]
from selenium.webdriver.common.by import By  # noqa: E402 - after test_console_browser's skip

HANDLERS = "from sluice_dev.examples import app  # echo, fanout, square, sum, ...\n"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any], str, str]]:
    yield from serve_console(tmp_path, HANDLERS, workers=2)


def listed(browser: Any) -> list[str]:
    rows = browser.find_elements(By.CSS_SELECTOR, "table.jobs tr[data-job]")
    return [r.get_attribute("data-job") for r in rows]


def test_the_jobs_page_filters_and_the_flow_tree_links_each_job(
        stack: tuple[Path, dict[str, Any], str, str], browser: Any) -> None:
    gateway, url, wait = logged_in(browser, stack)

    delayed = []
    for text in ("one", "two", "<b>three</b>"):
        status, accepted = http("POST", f"{gateway}/v1/queues/echo/jobs",
                                {"payload": {"text": text}, "delay_seconds": 600})  # within the relay's
        # delay horizon (15 min), so in Redis's delayed set; one beyond waits in the parking lot
        assert status == 202, accepted
        delayed.append(accepted["job_id"])
    status, accepted = http("POST", f"{gateway}/v1/queues/fanout/jobs", {"payload": {"n": 3}})
    assert status == 202, accepted
    parent = accepted["job_id"]
    wait_status(gateway, parent, "succeeded", timeout=120)
    _, view = http("GET", f"{gateway}/v1/jobs/{parent}")
    children, (then,) = view["children"], view["continuations"]
    wait_status(gateway, then, "succeeded", timeout=120)

    # The jobs page of echo, filtered in the page's own form: delayed, then one id.
    browser.get(f"{url}/queues/echo/jobs")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#job-filter"))
    browser.execute_script("document.querySelector('#job-filter select').value = 'delayed';")
    click(browser, "#job-filter button")
    wait.until(lambda d: "state=delayed" in d.current_url)
    assert listed(browser) == list(reversed(delayed))  # newest first: the one that runs last
    assert "<b>three</b>" in text_of(browser, "table.jobs")  # shown as text
    shot(browser, "console-jobs.png")
    field = browser.find_element(By.CSS_SELECTOR, '#job-filter input[name="prefix"]')
    field.clear()
    field.send_keys(delayed[1])
    click(browser, "#job-filter button")
    wait.until(lambda d: "prefix=" in d.current_url)
    assert listed(browser) == [delayed[1]]
    browser.get(f"{url}/queues/echo/jobs?state=ready&prefix=zz")
    assert "No ready jobs starting zz" in text_of(browser, "#jobs-empty")
    browser.get(f"{url}/queues/square/jobs?state=finished")  # the children, acked: the recent list
    finished = {r.get_attribute("data-job") for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-job]")}
    assert finished == set(children)

    # The flow, opened at a child: drawn from the parent, every node a link to its job page.
    browser.get(f"{url}/flows?id={children[0]}")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#flow a.node"))
    nodes = {a.get_attribute("data-job"): a.get_attribute("class")
             for a in browser.find_elements(By.CSS_SELECTOR, "#flow a.node")}
    assert set(nodes) == {parent, *children, then}
    assert all("succeeded" in cls for cls in nodes.values()), nodes
    first = browser.find_element(By.CSS_SELECTOR, "#flow a.node").get_attribute("data-job")
    assert first == parent
    shot(browser, "console-flow.png")
    click(browser, f'#flow a.node[data-job="{then}"]')
    wait.until(lambda d: text_of(d, "#job-status") == "succeeded")
    assert then in browser.current_url
    click(browser, "#flow-link")  # and back to the tree from the job page
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#flow a.node"))

    browser.get(f"{url}/queues/echo/depth")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#wait-p50"))
    assert text_of(browser, ".count-delayed") == "3"
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "svg.depth polygon.layer")) == 4)
    shot(browser, "console-depth.png")


def shot(browser: Any, name: str) -> None:
    folder = os.environ.get("SLUICE_CONSOLE_SCREENSHOTS")
    if folder:
        browser.save_screenshot(str(Path(folder) / name))
