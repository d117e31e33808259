"""``sluice console`` in a real headless browser (Debian's chromium through Selenium and chromium-driver)
against a running ``sluice dev``: a job appears and finishes, a queue pauses, a schedule pauses,
resumes and is deleted, a dead job is redriven.

Skipped, with the reason in the summary, where chromium, chromedriver or selenium is missing;
``.ci/run`` installs them, so CI always runs it. ``SLUICE_CONSOLE_SCREENSHOT=path`` saves the
queues page there (how docs/img/console.png is made).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.stack.test_dev import http, wait_for, with_ctrl_c

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
if not (CHROMIUM and DRIVER):
    pytest.skip("no chromium/chromedriver on this machine (apt-get install chromium chromium-driver): "
                "the console's browser test did not run", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver",
                                reason="selenium is not installed (pip install selenium)")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

SLUICE = str(Path(sys.executable).parent / "sluice")
HANDLERS = '''
from pathlib import Path
import sluice

app = sluice.Worker()


@app.handler("shout")
def shout(job, ctx):
    if job.payload.get("die") and not Path("redriven").exists():
        raise RuntimeError("<script>boom</script> refused")
    return {"shouted": str(job.payload["text"]).upper()}
'''


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any], str, str]]:
    with console_on_dev(tmp_path, "myjobs", HANDLERS, workers=1) as running:
        yield running


def serve_console(tmp_path: Path, handlers: str,
                  workers: int = 1) -> Iterator[tuple[Path, dict[str, Any], str, str]]:
    """``console_on_dev`` with ``handlers`` as the module ``myjobs``, for a fixture to yield from."""
    with console_on_dev(tmp_path, "myjobs", handlers, workers=workers) as running:
        yield running


@contextlib.contextmanager
def console_on_dev(tmp_path: Path, module: str, handlers: str,
                   workers: int) -> Iterator[tuple[Path, dict[str, Any], str, str]]:
    """``sluice dev`` with ``handlers`` as the module ``module``, and ``sluice console`` on it: the
    folder, the stack's endpoints, the console's URL and its launch link."""
    (tmp_path / f"{module}.py").write_text(handlers)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")} | {"PYTHONUNBUFFERED": "1"}
    argv = [SLUICE, "dev", "--workers", str(workers), "--log-level", "WARNING", "--handlers", module]
    dev = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    console = None
    try:
        endpoints = wait_for(tmp_path / ".sluice" / "endpoints.json", dev, timeout=90)
        console = subprocess.Popen(with_ctrl_c([SLUICE, "console", "--port", "0"]), cwd=tmp_path, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert console.stdout is not None
        line = console.stdout.readline()
        if "sluice console on http://127.0.0.1:" not in line:
            raise AssertionError(f"{line!r}: {console.stderr.read() if console.stderr else ''}")
        link = console.stdout.readline()  # the launch link, which logs the browser in once (issue 27)
        assert "/login?token=" in link, link
        url = line.split(" on ", 1)[1].split()[0].rstrip("/")
        yield tmp_path, endpoints, url, link.split(": ", 1)[1].strip()
    finally:
        if console is not None:
            console.send_signal(signal.SIGINT)
            console.wait(timeout=30)
        dev.send_signal(signal.SIGTERM)
        dev.communicate(timeout=60)


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=str(DRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def wait_status(gateway: str, job_id: str, want: str, timeout: float = 60) -> None:
    deadline, view = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        _, view = http("GET", f"{gateway}/v1/jobs/{job_id}")
        if view.get("status") == want:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not {want}: {view}")


class Until:
    """WebDriverWait that says what the page showed when it gives up. An element the page's own
    refresh replaced between finding it and reading it is looked for again (a CI run failed on
    that race: StaleElementReferenceException), as a missing one is."""

    def __init__(self, driver: Any, timeout: float = 60) -> None:
        self.driver, self.wait = driver, WebDriverWait(
            driver, timeout, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException])

    def until(self, condition: Any) -> Any:
        try:
            return self.wait.until(condition)
        except TimeoutException as exc:
            page = self.driver.page_source[:3000]
            raise AssertionError(f"gave up on {self.driver.current_url}:\n{page}") from exc


def logged_in(browser: Any, stack: tuple[Path, dict[str, Any], str, str],
              timeout: float = 90) -> tuple[str, str, Until]:
    """The browser logged in through the console's launch link (issue 27): the stack's gateway,
    the console's URL and a waiter on the browser."""
    _, endpoints, url, login = stack
    wait = Until(browser, timeout=timeout)
    browser.get(login)
    wait.until(lambda d: d.current_url.rstrip("/") == url)
    return endpoints["gateway_url"], url, wait


# The page re-renders itself every few seconds, so an element handle can go stale between finding
# it and using it (CI failed on both StaleElementReferenceException and chromedriver's "Node with
# given id does not belong to the document"). Reading and clicking inside one script is atomic
# with respect to the page's own refresh.
_TEXT_OF = "const e = document.querySelector(arguments[0]); return e === null ? null : e.innerText;"
_CLICK = ("const e = document.querySelector(arguments[0]);"
          " if (e === null) return false; e.click(); return true;")


def text_of(driver: Any, css: str) -> str:
    text = driver.execute_script(_TEXT_OF, css)
    if text is None:
        raise NoSuchElementException(css)
    return str(text)


def click(driver: Any, css: str) -> None:
    if not driver.execute_script(_CLICK, css):
        raise NoSuchElementException(css)


def pause_resume_and_delete_a_schedule(browser: Any, wait: Until, url: str, gateway: str) -> None:
    from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR

    body = json.dumps({"name": "hourly", "expression": "rate(1 hour)", "payload": {"text": "tick"}}).encode()
    req = urllib.request.Request(f"{gateway}/v1/admin/queues/shout/schedules", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          LOCAL_CALLER_HEADER: LOCAL_OPERATOR})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 201
    browser.get(url + "/schedules")
    row = 'tr[data-schedule="shout/hourly"]'
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, row))
    assert text_of(browser, f"{row} td.state") == "active"
    click(browser, f"{row} form.toggle button")
    wait.until(lambda d: text_of(d, "#flash") == "schedule hourly of shout paused")
    assert text_of(browser, f"{row} td.state") == "paused"
    click(browser, f"{row} form.toggle button")
    wait.until(lambda d: text_of(d, "#flash") == "schedule hourly of shout resumed")
    assert text_of(browser, f"{row} td.state") == "active"
    click(browser, f"{row} form.delete button")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#confirm-question"))
    assert "Delete schedule hourly of shout?" in text_of(browser, "#confirm-question")
    click(browser, "form.confirm button")
    wait.until(lambda d: text_of(d, "#flash") == "schedule hourly of shout deleted")
    assert not browser.find_elements(By.CSS_SELECTOR, row)


def test_the_console_shows_a_job_finish_pauses_a_queue_and_redrives_a_dead_job(
        stack: tuple[Path, dict[str, Any], str, str], browser: Any) -> None:
    folder, endpoints, url, login = stack
    gateway = endpoints["gateway_url"]
    wait = Until(browser)
    # Without the cookie nothing is served; the printed link sets it (HttpOnly, SameSite=Strict).
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url + "/", timeout=10)
    assert refused.value.code == 401
    browser.get(login)
    wait.until(lambda d: d.current_url.rstrip("/") == url)
    (cookie,) = browser.get_cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == ("sluice_console", True, "Strict")

    status, accepted = http("POST", f"{gateway}/v1/queues/shout/jobs", {"payload": {"text": "hi console"}})
    assert status == 202, accepted
    job_id = accepted["job_id"]
    browser.get(f"{url}/jobs?id={job_id}")
    wait.until(lambda d: text_of(d, "#job-status") == "succeeded")  # the page refreshes itself
    assert "HI CONSOLE" in text_of(browser, "table.job")

    browser.get(url + "/")
    row = 'tr[data-queue="shout"]'
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, row))
    assert text_of(browser, f"{row} td.state") == "running"
    # The page's script refetches the table; the second poll gives the sparkline its first line.
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"{row} svg.spark polyline"))
    # the queue's own finished counts, through the operator API from Redis: the job above succeeded
    totals = browser.find_element(By.CSS_SELECTOR, f"{row} td.finished").get_attribute("title")
    assert totals == "since the counters began: 1 succeeded, 0 failed or dead, 0 cancelled", totals
    click(browser, f"{row} form.toggle button")
    wait.until(lambda d: text_of(d, "#flash") == "shout paused")
    assert text_of(browser, f"{row} td.state") == "paused"
    _, queue = http("GET", f"{gateway}/v1/queues/shout")
    assert queue["paused"] is True
    click(browser, f"{row} form.toggle button")
    wait.until(lambda d: text_of(d, "#flash") == "shout resumed")
    assert text_of(browser, f"{row} td.state") == "running"
    for name, value in (("per_second", "5"), ("burst", "10")):
        field = browser.find_element(By.CSS_SELECTOR, f'{row} form.rate input[name="{name}"]')
        field.clear()
        field.send_keys(value)
    # The table refreshes every 2 s; a refresh must not wipe a form being filled in, even once
    # the focus has left it.
    browser.execute_script("document.activeElement.blur();")
    time.sleep(4.5)
    typed = browser.execute_script(
        f"return Array.from(document.querySelectorAll('{row} form.rate input')).map(i => i.value);")
    assert typed[-2:] == ["5", "10"], typed
    click(browser, f"{row} form.rate button")
    wait.until(lambda d: text_of(d, "#flash") == "shout rate set")
    assert text_of(browser, f"{row} td.limit") == "5/s burst 10"
    _, queue = http("GET", f"{gateway}/v1/queues/shout")
    assert (queue["rate_per_s"], queue["burst"]) == (5, 10)

    pause_resume_and_delete_a_schedule(browser, wait, url, gateway)

    status, accepted = http("POST", f"{gateway}/v1/queues/shout/jobs",
                            {"payload": {"text": "dies once", "die": True}, "max_attempts": 1})
    assert status == 202, accepted
    dead_id = accepted["job_id"]
    wait_status(gateway, dead_id, "dead")
    browser.get(f"{url}/queues/shout/dlq")
    dead_row = f'tr[data-job="{dead_id}"]'
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, dead_row))
    assert "<script>boom</script> refused" in text_of(browser, dead_row)  # shown as text, not run
    if os.environ.get("SLUICE_CONSOLE_SCREENSHOT"):
        browser.get(url + "/")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.spark polyline"))
        browser.save_screenshot(os.environ["SLUICE_CONSOLE_SCREENSHOT"])
        browser.get(f"{url}/queues/shout/dlq")

    (folder / "redriven").write_text("yes")  # the handler succeeds from now on
    click(browser, f"{dead_row} form.redrive button")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#confirm-question"))
    assert f"Redrive dead job {dead_id} of shout?" in text_of(browser, "#confirm-question")
    click(browser, "form.confirm button")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#flash"))
    assert text_of(browser, "#flash") == "redrove 1"
    wait_status(gateway, dead_id, "succeeded")
    browser.get(f"{url}/jobs?id={dead_id}")
    wait.until(lambda d: text_of(d, "#job-status") == "succeeded")
