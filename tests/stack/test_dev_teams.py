"""``sluice dev --worker NAME=MODULE`` (issue 15): two worker functions side by side, each with its
own containers, each queue routed to its function; the gateway refuses an unrouted queue.

One stack for the module: the default worker (sluice_dev.examples) and team "words"
(sluice_dev.examples_team), over real HTTP, Kafka, Redis and DynamoDB on moto.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sluice.core.errors import RouteConflict
from sluice_dev.cli import main
from sluice_dev.local.dev import DevOptions, DevStack
from tests.stack.gateway_http import http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
INVOKED: list[tuple[str, dict[str, Any]]] = []  # (function, event) of every finished invocation


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevStack, dict[str, Any]]]:
    state: Path = tmp_path_factory.mktemp("teams") / ".sluice"
    # The safety net rarely runs: the jobs below reach their worker through the relay's dispatch.
    dev = DevStack(DevOptions(state_dir=state, workers=2, log_level="WARNING", safety_net_every_s=600,
                              team_workers=(("words", "sluice_dev.examples_team"),), history=False))
    yield from started(dev, INVOKED)


def started(dev: DevStack, invoked: list[tuple[str, dict[str, Any]]]
            ) -> Iterator[tuple[DevStack, dict[str, Any]]]:
    """A module's stack, started, recording every finished invocation in ``invoked``; stopped after."""
    endpoints = dev.start()
    assert dev.lambdas is not None
    dev.lambdas.on_finish = lambda inv: invoked.append((inv.function, dict(inv.event or {})))
    try:
        yield dev, endpoints
    finally:
        dev.stop()


def wait_job(gateway: str, job_id: str, timeout_s: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        _, view = http("GET", f"{gateway}/v1/jobs/{job_id}")
        if view.get("status") in ("succeeded", "failed", "dead", "cancelled") or time.monotonic() > deadline:
            return view  # type: ignore[no-any-return]
        time.sleep(0.3)


def test_each_queue_runs_on_its_own_worker_function(stack: tuple[DevStack, dict[str, Any]]) -> None:
    dev, endpoints = stack
    gateway = endpoints["gateway_url"]
    assert endpoints["workers"] == [{"name": "words", "function": "sluice-worker-words",
                                     "handlers": "sluice_dev.examples_team"}]
    assert "word-count -> sluice-worker-words (typed)" in endpoints["routes"]
    assert "thumbnails -> sluice-worker (typed)" in endpoints["routes"]
    assert "echo -> sluice-worker" in endpoints["routes"]
    # Its own function in the local Lambda service, configured from infra/worker.yaml.
    assert dev.lambdas is not None and "sluice-worker-words" in dev.lambdas.functions
    team = dev.team_functions["words"]
    assert team.env["SLUICE_HANDLERS_MODULE"] == "sluice_dev.examples_team"
    assert team.env["POWERTOOLS_SERVICE_NAME"] == "sluice-worker-words" and team.timeout_s == 300
    code, words = http("POST", f"{gateway}/v1/queues/word-count/jobs", {"payload": {"text": "one two three"}})
    assert code == 202, words
    code, echo = http("POST", f"{gateway}/v1/queues/echo/jobs", {"payload": {"hi": 1}})
    assert code == 202, echo
    done = wait_job(gateway, words["job_id"])
    assert done["status"] == "succeeded", done
    assert done["result"]["words"] == 3 and done["result"]["function"] == "sluice-worker-words"
    assert wait_job(gateway, echo["job_id"])["status"] == "succeeded"
    # The relay dispatched each queue's backlog to its routed function (an invocation is recorded
    # when it returns, a moment after its job's result is written).
    deadline = time.monotonic() + 20
    while True:
        relayed = {(fn, q) for fn, e in list(INVOKED) if e.get("source") == "relay"
                   for q in e.get("queues", [])}
        if {("sluice-worker-words", "word-count"), ("sluice-worker", "echo")} <= relayed or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ("sluice-worker-words", "word-count") in relayed and ("sluice-worker", "echo") in relayed, INVOKED
    assert ("sluice-worker", "word-count") not in relayed
    # Each function ran in its own containers.
    by_function = {c["function"] for c in dev.lambdas.describe()}
    assert {"sluice-worker", "sluice-worker-words"} <= by_function


def test_a_teams_handler_starts_children_and_a_continuation(stack: tuple[DevStack, dict[str, Any]]) -> None:
    """A team's worker function, configured from infra/worker.yaml as deployed, reaches the gateway
    function for ctx.enqueue_many: the children and the continuation run in the team's function."""
    _, endpoints = stack
    gateway = endpoints["gateway_url"]
    code, accepted = http("POST", f"{gateway}/v1/queues/word-batch/jobs",
                          {"payload": {"texts": ["one two", "three", "four five six"]}})
    assert code == 202, accepted
    parent = wait_job(gateway, accepted["job_id"])
    assert parent["status"] == "succeeded", parent
    assert parent["result"]["children"] == 3 and len(parent["children"]) == 3, parent
    total = wait_job(gateway, parent["result"]["continuation"])
    assert total["status"] == "succeeded" and total["parent_id"] == parent["job_id"], total
    assert total["result"] == {"words": 6, "children": 3}, total
    for child in parent["children"]:
        done = wait_job(gateway, child)
        assert done["result"]["function"] == "sluice-worker-words", done


def test_an_unrouted_queues_job_is_refused_at_the_door(stack: tuple[DevStack, dict[str, Any]]) -> None:
    _, endpoints = stack
    code, problem = http("POST", f"{endpoints['gateway_url']}/v1/queues/nobody-handles/jobs", {"payload": 1})
    assert code == 404 and problem["code"] == "NO_ROUTE", problem
    # word-count is typed (model=Text): a payload that does not match its published schema is a
    # 400 naming each field, before Kafka; so is one for the default worker's typed thumbnails.
    code, problem = http("POST", f"{endpoints['gateway_url']}/v1/queues/word-count/jobs",
                         {"payload": {"text": 5, "extra": True}})
    assert code == 400 and problem["code"] == "PAYLOAD_INVALID", problem
    assert {e["pointer"] for e in problem["errors"]} == {"/payload", "/payload/text"}, problem["errors"]
    code, problem = http("POST", f"{endpoints['gateway_url']}/v1/queues/thumbnails/jobs",
                         {"payload": {"width": 0}})
    assert code == 400 and problem["code"] == "PAYLOAD_INVALID", problem
    code, view = http("GET", f"{endpoints['gateway_url']}/v1/queues/word-count")
    assert code == 200
    assert view["route"]["function"] == "sluice-worker-words" and view["route"]["owner"] == "words"
    assert view["route"]["payload_schema"]["properties"]["text"]["type"] == "string"
    _, openapi = http("GET", f"{endpoints['gateway_url']}/v1/openapi.json")
    assert {"word-count", "thumbnails"} <= set(openapi["x-sluice-typed-queues"])


def test_sluice_queues_and_routes_show_each_queues_route(stack: tuple[DevStack, dict[str, Any]]) -> None:
    dev, _ = stack
    args = ["--state-dir", str(dev.options.state_dir)]
    out = CliRunner(mix_stderr=False).invoke(main, [*args, "queues", "--json"])
    assert out.exit_code == 0, out.output + out.stderr
    rows = {json.loads(line)["queue"]: json.loads(line) for line in out.stdout.splitlines()}
    assert rows["word-count"]["route"] == "sluice-worker-words (words typed)"
    out = CliRunner(mix_stderr=False).invoke(main, [*args, "routes", "list"])
    assert out.exit_code == 0 and "sluice-worker-words  (words)  typed: word-count" in out.stdout
    # A route to a function that does not exist is refused, and nothing is written.
    register = [*args, "routes", "register", "--function"]
    out = CliRunner(mix_stderr=False).invoke(main, [*register, "sluice-worker-ghost",
                                                    "--handlers", "tests.stack.ghost_handlers"])
    assert out.exit_code == 1 and "does not exist" in out.stderr, out.output + out.stderr
    # Another team claiming word-count is refused, naming its owner.
    out = CliRunner(mix_stderr=False).invoke(main, [*register, "sluice-worker", "--handlers",
                                                    "sluice_dev.examples_team", "--owner", "other"])
    assert out.exit_code == 1 and "already routed by 'words'" in out.stderr, out.output + out.stderr
    out = CliRunner(mix_stderr=False).invoke(main, [*args, "routes", "list", "--json"])
    assert {json.loads(x)["pattern"] for x in out.stdout.splitlines()} >= {"word-count", "echo"}
    assert "ghost" not in out.stdout


def test_a_teams_redis_credentials_get_noperm_on_another_teams_queue_keys(
        stack: tuple[DevStack, dict[str, Any]]) -> None:
    """Issue 27, item 2: ``sluice dev --worker`` runs Redis with the ACL users of ElastiCache RBAC.
    Team "words" connects as its own user, whose keys are its queues' alone: NOPERM (NotPermitted
    through the adapter) on the default worker's queue, on Sluice's own, on FLUSHALL and KEYS."""
    import redis

    from sluice.backends.redis.connection import RedisConnection
    from sluice.backends.redis.keys import QueueKeys
    from sluice.backends.redis.queue import RedisJobQueue
    from sluice.core.config import Settings
    from sluice.core.errors import NotPermitted

    dev, endpoints = stack
    env = dev.team_functions["words"].env
    user, password = env["SLUICE_REDIS_USERNAME"], env["SLUICE_REDIS_PASSWORD"]
    assert user == "sluice-worker-words" and endpoints["redis_users"][user] == "worker"
    assert endpoints["redis_users"]["sluice-relay"] == "relay"
    admin = redis.Redis.from_url(endpoints["redis_url"], decode_responses=True)
    connected = {c["user"] for c in admin.client_list()}
    assert {"sluice-relay", "sluice-worker", "sluice-worker-words"} <= connected  # each as its own user
    echo = QueueKeys("echo")  # the default worker's queue
    admin.hset(echo.job("theirs"), "p", "{}")
    # What the calls below aim at, not the whole keyspace: the live stack's workers and relay add and
    # drop their own keys meanwhile (a wake list popped empty went, and dbsize read 38 for 39).
    admin.set("sentinel-of-the-test", "1")  # FLUSHALL would take it
    before = admin.llen(echo.wake)
    words = RedisJobQueue(RedisConnection.from_settings(Settings(redis_url=endpoints["redis_url"],
                                                                 redis_username=user,
                                                                 redis_password=password)))  # type: ignore[arg-type]
    try:
        assert isinstance(words.lease("word-count", 1), list)  # its own queue: allowed
        raw = words.conn.client
        for call in (lambda: raw.lpush(echo.wake, "x"), lambda: raw.hget(echo.job("theirs"), "p"),
                     lambda: raw.delete(echo.job("theirs")), lambda: raw.flushall(), lambda: raw.keys("*"),
                     lambda: raw.script_load("while true do end")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                call()
        for call in (lambda: words.lease("echo", 1), lambda: words.lease("sluice-relay", 1),
                     lambda: words.ack("echo", "theirs", 1)):
            with pytest.raises(NotPermitted):
                call()
        assert admin.get("sentinel-of-the-test") == "1" and admin.llen(echo.wake) == before
        assert admin.hget(echo.job("theirs"), "p") == "{}"
    finally:
        admin.delete(echo.job("theirs"), "sentinel-of-the-test")
        words.close()
        admin.close()


def test_a_teams_next_job_runs_after_redis_lost_its_scripts(stack: tuple[DevStack, dict[str, Any]]) -> None:
    """A team's Redis user may not SCRIPT LOAD (docs/security.md, "Who loads a worker's scripts"):
    after Redis's script cache is flushed (a restart, a failover), the team's worker meets NOSCRIPT,
    asks the internal function to load its scripts (shipped ones only), and its next job runs."""
    import redis

    from sluice.backends.redis.acl import WORKER
    from sluice.backends.redis.scripts import source
    from sluice.core.script_loads import sha1
    from sluice_dev.local.dev import INTERNAL_FUNCTION

    _dev, endpoints = stack
    admin = redis.Redis.from_url(endpoints["redis_url"], decode_responses=True)
    try:
        seen = len(INVOKED)
        admin.script_flush()
        code, words = http("POST", f"{endpoints['gateway_url']}/v1/queues/word-count/jobs",
                           {"payload": {"text": "after a flush"}})
        assert code == 202, words
        done = wait_job(endpoints["gateway_url"], words["job_id"])
        assert done["status"] == "succeeded" and done["result"]["words"] == 3, done
        loads = [ev for fn, ev in INVOKED[seen:] if fn == INTERNAL_FUNCTION
                 and ev.get("sluice_internal") == "load_scripts"]
        assert loads, [fn for fn, _ in INVOKED[seen:]]
        assert set(loads[0]["scripts"]) == set(WORKER.scripts)
        assert all(admin.script_exists(*(sha1(source(n)) for n in WORKER.scripts)))
    finally:
        admin.close()


def test_two_workers_claiming_one_queue_stop_the_stack_from_starting(tmp_path: Path) -> None:
    dev = DevStack(DevOptions(state_dir=tmp_path / ".sluice", workers=1, log_level="WARNING", history=False,
                              team_workers=(("copycat", "sluice_dev.examples"),)))
    with pytest.raises(RouteConflict, match="already routed by"):
        dev.start()
    assert dev.lambdas is None and not (tmp_path / ".sluice" / "endpoints.json").exists()


def test_with_unrouted_default_such_a_job_dies_at_once_in_the_default_worker(tmp_path: Path) -> None:
    """The other guard: accepted (UnroutedQueues=default), dispatched to the default worker, which
    has no handler: dead on its first lease with the reason, never released, never re-run."""
    dev = DevStack(DevOptions(state_dir=tmp_path / ".sluice", workers=1, log_level="WARNING", history=False,
                              safety_net_every_s=600, parameters={"UnroutedQueues": "default"},
                              team_workers=(("words", "sluice_dev.examples_team"),)))
    endpoints = dev.start()
    try:
        code, accepted = http("POST", f"{endpoints['gateway_url']}/v1/queues/nobody-handles/jobs",
                              {"payload": 1, "max_attempts": 5})
        assert code == 202, accepted
        done = wait_job(endpoints["gateway_url"], accepted["job_id"])
        assert done["status"] == "dead" and done["attempts"] == 1, done
        assert done["last_error"] == "no handler registered for queue 'nobody-handles'"
    finally:
        dev.stop()


def test_sluice_dev_fires_a_stored_schedule_into_the_firings_function_once_per_firing(
        stack: tuple[DevStack, dict[str, Any]]) -> None:
    """Issue 17: the local scheduler fires the table's schedules as EventBridge Scheduler would (the
    time injected: no real minute waited); a firing delivered twice makes one job."""
    from sluice.core import schedules
    from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR
    from sluice_dev.local.dev import FIRINGS_FUNCTION

    dev, endpoints = stack
    assert dev.schedules is not None and dev.lambdas is not None
    body = json.dumps({"name": "minutely", "expression": "rate(1 minute)", "payload": {"text": "tick"}})
    headers = {"Content-Type": "application/json", LOCAL_CALLER_HEADER: LOCAL_OPERATOR}
    req = urllib.request.Request(f"{endpoints['gateway_url']}/v1/admin/queues/echo/schedules",
                                 data=body.encode(), method="POST", headers=headers)
    with urllib.request.urlopen(req, timeout=30) as r:
        created = json.loads(r.read())
    assert r.status == 201 and created["queue"] == "echo"
    (event,) = dev.schedules.tick(now_ms=created["created_at_ms"] + 60_000)
    assert created["next_firing_ms"] == created["created_at_ms"] + 60_000
    assert event == {"sluice_schedule": "minutely", "queue": "echo",
                     "scheduled_time": schedules.iso(created["created_at_ms"] + 60_000)}
    again = dev.lambdas.invoke(FIRINGS_FUNCTION, event, caller=dev.scheduler_caller())  # delivered twice
    assert again.done.wait(60) and again.error is None, again.error
    job_id = again.result["job_id"]
    view = wait_job(endpoints["gateway_url"], job_id)
    assert (view["status"], view["attempts"]) == ("succeeded", 1), view
    def deliveries() -> int:
        return len([e for f, e in INVOKED if f == FIRINGS_FUNCTION and e == event])

    deadline = time.monotonic() + 30
    while deliveries() < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert deliveries() == 2  # both reached the firings function, one job ran (attempts 1)
    assert dev.schedules.tick(now_ms=created["created_at_ms"] + 60_500) == []


def test_the_default_workers_code_schedules_are_registered_updated_and_removed_by_sluices_registrar(
        tmp_path: Path) -> None:
    """Issue 31: the default worker runs handler code and holds no Scheduler rights, so Sluice's
    registrar function (template.yaml's RegistrarFunction) asks it what its module declares and
    registers it at start, as CloudFormation's Create of DefaultWorkerRegistration does: listed by the
    operator API and ``sluice schedules list`` as the default worker's code's. An Update brings the
    table back to the code (a changed schedule restored, one the code no longer declares removed, an
    operator's left alone), a request naming another owner is refused, and the stack's Delete removes
    the code's schedules."""
    import boto3

    from sluice.backends.dynamodb.routes import DynamoRouteStore
    from sluice.backends.dynamodb.schedules import DynamoScheduleStore
    from sluice.core.schedules import Schedule
    from sluice.entry.worker import describe, load_app
    from sluice_dev.local import teams
    from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR

    state = tmp_path / ".sluice"
    dev = DevStack(DevOptions(state_dir=state, workers=1, log_level="WARNING", history=False,
                              handlers="tests.stack.scheduled_handlers"))
    endpoints = dev.start()
    try:
        assert dev.settings is not None
        # The worker can write neither: its environment names no schedules or routes table.
        assert not {"SLUICE_SCHEDULES_TABLE", "SLUICE_ROUTES_TABLE"} & set(dev.function("WorkerFunction").env)
        assert "ticks -> sluice-worker" in endpoints["routes"]
        req = urllib.request.Request(f"{endpoints['gateway_url']}/v1/admin/queues/ticks/schedules",
                                     headers={LOCAL_CALLER_HEADER: LOCAL_OPERATOR})
        with urllib.request.urlopen(req, timeout=30) as r:
            (listed,) = json.loads(r.read())["schedules"]
        assert (listed["name"], listed["expression"], listed["payload"], listed["declared_by"]) == (
            "hourly", "rate(1 hour)", {"n": 1}, "sluice")
        shown = CliRunner().invoke(main, ["--state-dir", str(state), "schedules", "list", "ticks"])
        assert shown.exit_code == 0, shown.output
        assert "hourly  rate(1 hour)  active" in shown.output
        assert "declared by the default worker's code" in shown.output

        db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=dev.settings.aws_endpoint_url)
        store = DynamoScheduleStore(db, dev.function("OperatorFunction").env["SLUICE_SCHEDULES_TABLE"])
        # As a previous deploy's code left it: hourly at another rate and payload, and one since removed.
        store.replace(Schedule("hourly", "rate(2 hours)", "ticks", {"n": 0}, 1, owner="sluice"))
        store.create(Schedule("old", "rate(1 day)", "ticks", None, 1, owner="sluice"))
        store.create(Schedule("ops", "rate(1 day)", "ticks", None, 1))  # an operator's
        digest = describe(load_app("tests.stack.scheduled_handlers"))["digest"]
        answer = dev.register_default(kind="Update", properties={"Declarations": digest})
        data = answer["Data"]
        assert (data["Schedules"], data["SchedulesRemoved"]) == ("ticks/hourly", "ticks/old")
        restored = store.get("ticks", "hourly")
        assert (restored.expression, restored.payload, restored.owner) == ("rate(1 hour)", {"n": 1}, "sluice")
        assert store.find("ticks", "old") is None and store.get("ticks", "ops").owner == ""

        claim = dev.register_default(kind="Update", properties={"Owner": "words"}, check=False)
        assert claim["Status"] == "FAILED" and "names owner 'words'" in claim["Reason"], claim

        # The upgrade's last step: CloudFormation deletes the old DefaultWorkerRoutes, whose
        # ServiceToken was the worker. It has no routes table: it removes nothing.
        routes = DynamoRouteStore.from_settings(dev.settings)
        before = routes.list_routes()
        bucket = teams.ResponseBucket(dev.settings)
        key, url = bucket.url()
        legacy = teams.cfn_event("Delete", "arn:aws:cloudformation:us-east-1:000000000000:stack/sluice/local",
                                 url, {"ServiceToken": "sluice-worker", "Owner": "sluice"},
                                 "sluice-routes:sluice:sluice-worker")
        assert dev.lambdas is not None
        inv = dev.lambdas.invoke("sluice-worker", legacy, asynchronous=False, caller=dev.deployer_caller())
        assert inv.done.wait(60) and (bucket.answer(key, timeout_s=10) or {}).get("Status") == "SUCCESS"
        assert routes.list_routes() == before and store.get("ticks", "hourly").owner == "sluice"

        gone = dev.register_default(kind="Delete")
        assert gone["Data"]["SchedulesRemoved"] == "ticks/hourly"
        assert [s.name for s in store.all("ticks")] == ["ops"]
        assert routes.list_routes() == []  # its routes went too
    finally:
        dev.stop()


def test_the_teams_code_schedules_are_registered_updated_and_removed_by_its_registrar(
        stack: tuple[DevStack, dict[str, Any]]) -> None:
    """Issue 31, item 5: ``app.schedule`` in sluice_dev.examples_team is registered by the words team's
    registrar function at start, as CloudFormation's Create does; an Update brings the table back to
    the code (a changed schedule restored, one the code no longer declares removed, an operator's
    left alone), a wrong Declarations digest is refused, and the stack's Delete removes the team's.
    Last in the module: it deletes the team's routes, then registers them again."""
    import boto3

    from sluice.backends.dynamodb.schedules import DynamoScheduleStore
    from sluice.core.schedules import Schedule
    from sluice.entry.worker import describe, load_app
    from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR

    dev, endpoints = stack
    assert dev.settings is not None
    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=dev.settings.aws_endpoint_url)
    store = DynamoScheduleStore(db, dev.function("OperatorFunction").env["SLUICE_SCHEDULES_TABLE"])
    declared = store.get("word-count", "new-year")
    assert (declared.expression, declared.payload, declared.owner, declared.paused) == (
        "cron(0 0 1 1 ? *)", {"text": "happy new year", "i": None}, "words", False)
    req = urllib.request.Request(f"{endpoints['gateway_url']}/v1/admin/queues/word-count/schedules",
                                 headers={LOCAL_CALLER_HEADER: LOCAL_OPERATOR})
    with urllib.request.urlopen(req, timeout=30) as r:
        listed = {s["name"]: s for s in json.loads(r.read())["schedules"]}
    assert listed["new-year"]["next_firing_ms"] % 86_400_000 == 0  # a midnight (UTC): next 1 January
    assert listed["new-year"]["declared_by"] == "words"

    # As a previous deploy's code left it: new-year with another expression, and one since removed.
    store.replace(Schedule("new-year", "rate(1 day)", "word-count", {"text": "x"}, 1, owner="words"))
    store.create(Schedule("old", "rate(1 day)", "word-count", {"text": "old"}, 1, owner="words"))
    store.create(Schedule("ops", "rate(1 day)", "word-count", {"text": "ops"}, 1))  # an operator's
    digest = describe(load_app("sluice_dev.examples_team"))["digest"]
    answer = dev.register_team("words", kind="Update", properties={"Declarations": digest})
    assert answer["Data"]["Schedules"] == "word-count/new-year"
    assert answer["Data"]["SchedulesRemoved"] == "word-count/old"
    restored = store.get("word-count", "new-year")
    assert (restored.expression, restored.payload) == ("cron(0 0 1 1 ? *)",
                                                       {"text": "happy new year", "i": None})
    assert store.find("word-count", "old") is None and store.get("word-count", "ops").owner == ""

    wrong = dev.register_team("words", kind="Update", properties={"Declarations": "sha256-" + "0" * 32},
                              check=False)
    assert wrong["Status"] == "FAILED" and "routes digest" in wrong["Reason"], wrong

    gone = dev.register_team("words", kind="Delete")
    assert gone["Data"]["SchedulesRemoved"] == "word-count/new-year"
    assert [s.name for s in store.all("word-count")] == ["ops"]
    dev.register_team("words", kind="Create")  # the routes back, for whatever runs after
    assert store.get("word-count", "new-year").owner == "words"
    store.delete("word-count", "ops")
