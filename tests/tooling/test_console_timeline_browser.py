"""Issue 32 items 2 and 3 in a real headless browser against a running ``sluice dev``.

A job's timeline after a real freeze: the handlers module freezes its own worker process
(SIGSTOP, a GC pause) on the job's first attempt, after the runtime's lease check and just before
the fenced write; the job's 1 s lease lapses, the other worker takes it over and writes; the
first wakes up and writes with its old token, and the jobs table refuses it. The console's
timeline page, read through the operator route, shows the takeover and the refused write.

The scenario page: three real runs of gc-pause, its two controls changing the outcome (fencing on:
A's late write refused; off: A's stale write accepted over B's; a freeze shorter than the lease:
no takeover at all).

``SLUICE_CONSOLE_SCREENSHOTS=dir`` saves timeline.png and scenario.png there (docs/img is made so).
Skipped where chromium, chromedriver or selenium is missing, as test_console_browser.py is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.stack.test_dev import http
from tests.tooling.test_console_browser import (
    Until,
    browser,
    click,
    console_on_dev,
    logged_in,
    text_of,
    wait_status,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with test_console_browser.py

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402

HANDLERS = '''
import os, signal, subprocess

import sluice
from sluice.core.bus import ResultWriting

app = sluice.Worker()


@app.handler("freeze")
def freeze(job, ctx):
    return {"token": ctx.token}


def gc_pause(e):
    # The first attempt's worker freezes whole (its heartbeat too) after the lease check, before
    # its fenced write; a detached shell wakes it up 25 s later, long after its 1 s lease (the relay
    # reaps a lapsed lease and starts a worker for it within a few maintenance rounds of 5 s, under load).
    if e.token == 1:
        subprocess.Popen(["sh", "-c", f"sleep 25; kill -CONT {os.getpid()}"], start_new_session=True)
        os.kill(os.getpid(), signal.SIGSTOP)


app.events.subscribe(gc_pause, ResultWriting)
'''


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any], str, str]]:
    with console_on_dev(tmp_path, "freezer", HANDLERS, workers=2) as running:
        yield running


def kinds(driver: Any) -> list[str]:
    return list(driver.execute_script(
        "return Array.from(document.querySelectorAll('#timeline [data-kind]')).map(e => e.dataset.kind);"))


def shoot(driver: Any, name: str) -> None:
    folder = os.environ.get("SLUICE_CONSOLE_SCREENSHOTS")
    if folder:
        driver.save_screenshot(str(Path(folder) / name))


def run_scenario(driver: Any, wait: Until, url: str, freeze: str, fencing: bool) -> str:
    driver.get(url + "/scenario")
    field = driver.find_element(By.ID, "freeze_for")
    field.clear()
    field.send_keys(freeze)
    box = driver.find_element(By.ID, "fencing")
    if box.is_selected() != fencing:
        box.click()
    page = driver.find_element(By.TAG_NAME, "html")
    click(driver, "#scenario-run")
    # The page shows the session's last run until the POST's answer replaces it: waiting for "done"
    # at once found the previous run's (a CI run read "Running: A frozen for 5 s..." as the third's).
    wait.until(staleness_of(page))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#scenario-done, #scenario-error"))
    return text_of(driver, "#scenario")


def test_a_timeline_shows_a_takeover_and_a_refused_write_and_the_scenario_controls_change_the_outcome(
        stack: tuple[Path, dict[str, Any], str, str], browser: Any) -> None:
    gateway, url, wait = logged_in(browser, stack)

    status, accepted = http("POST", f"{gateway}/v1/queues/freeze/jobs",
                            {"payload": {"n": 1}, "lease_seconds": 1})
    assert status == 202, accepted
    job_id = accepted["job_id"]
    wait_status(gateway, job_id, "succeeded", timeout=90)
    _, view = http("GET", f"{gateway}/v1/jobs/{job_id}")
    assert view["result"] == {"token": 2} and view["attempts"] == 2, view  # the second worker's
    browser.get(f"{url}/jobs?id={job_id}")
    click(browser, "#job-timeline")
    # A's refused write is recorded when A wakes up (25 s after its freeze): the page is read again.
    deadline = time.monotonic() + 60
    while "write-refused" not in kinds(browser) and time.monotonic() < deadline:
        time.sleep(1)
        browser.refresh()
    found = kinds(browser)
    for kind in ("lease", "grant", "takeover", "expired", "write-accepted", "write-refused", "ack"):
        assert kind in found, (kind, found)
    steps = text_of(browser, "#timeline-steps")
    assert "refuses" in steps and "token 1 is stale, the current one is 2" in steps, steps
    shoot(browser, "timeline.png")

    fenced = run_scenario(browser, wait, url, "12", True)
    assert "A's late write (token 1) was rejected and B's result (token 2) stands" in fenced, fenced
    assert {"takeover", "write-refused"} <= set(kinds(browser)) and "stale-accepted" not in kinds(browser)
    shoot(browser, "scenario.png")
    unfenced = run_scenario(browser, wait, url, "12", False)
    assert "BUG: two workers acted as the owner" in unfenced and '"by": "A"' in unfenced, unfenced
    assert "stale-accepted" in kinds(browser) and "write-refused" not in kinds(browser)
    short = run_scenario(browser, wait, url, "5", True)
    assert "A kept its lease and wrote; B never ran" in short, short
    assert "takeover" not in kinds(browser)
