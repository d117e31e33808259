"""Issue 14: the local stack runs each function as template.yaml configures it.

``sluice dev``, the demo and the chaos runtime build their functions through
``DevStack.prepare``; these tests take what it hands the local Lambda service (the
``lambdas.Function`` objects and the scheduler's timers) and compare them with the
template's configuration field by field. Any difference that is neither a named override
(``DevStack.overrides``) nor a named binding (``deployed.BINDINGS``) fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from sluice.core.config import Settings
from sluice.core.errors import ConfigError
from sluice_dev.local import deployed, servers
from sluice_dev.local.api_server import LOCAL_OPERATOR
from sluice_dev.local.dev import DevOptions, DevStack
from sluice_dev.local.lambdas import Function
from sluice_dev.local.template import Resource, load, rate_seconds
from tests.infra import cfn

PROCESS_PLUMBING = {*servers.DUMMY_AWS_ENV, "PYTHONPATH"}  # not configuration: credentials for moto, imports

LOCAL = Settings(redis_url="redis://127.0.0.1:7001/0", kafka_bootstrap="127.0.0.1:7002",
                 aws_endpoint_url="http://127.0.0.1:7003", lambda_endpoint_url="http://127.0.0.1:7004",
                 kafka_security="plaintext", job_id_secret=SecretStr("k" * 32))


def _chaos_options(tmp: Path) -> DevOptions:
    """What the chaos suite's Lambda runtime asks for (sluice_dev.chaos.runtimes.LambdaRuntime)."""
    from sluice_dev.chaos.runtimes import LambdaRuntime as R

    return DevOptions(state_dir=tmp, handlers="sluice_dev.chaos.functions",
                      relay_handler="sluice_dev.chaos.functions:relay", workers=4,
                      worker_timeout_s=R.WORKER_TIMEOUT_S, relay_every_s=R.RELAY_EVERY_S,
                      relay_timeout_s=R.RELAY_TIMEOUT_S, safety_net_every_s=R.SAFETY_NET_EVERY_S,
                      gateway_concurrency=1, history=False, log_level="WARNING",
                      settings={"default_lease_seconds": 2, "worker_batch": 30,
                                "history_path": str(tmp / "h")})


def _demo_options(tmp: Path) -> DevOptions:
    from sluice_dev.local.demo import DEMO_SETTINGS
    from sluice_dev.local.workload import TEAM_WORKER

    return DevOptions(state_dir=tmp, workers=4, relay_every_s=300, relay_timeout_s=600, safety_net_every_s=2,
                      log_level="WARNING", settings=dict(DEMO_SETTINGS), team_workers=(TEAM_WORKER,),
                      team_containers=1)


CASES: dict[str, Any] = {
    "sluice dev": lambda tmp: DevOptions(state_dir=tmp),
    "sluice dev --config-env dev": lambda tmp: DevOptions(state_dir=tmp, config_env="dev"),
    "sluice dev --config-env prod": lambda tmp: DevOptions(state_dir=tmp, config_env="prod"),
    "sluice demo": _demo_options,
    "sluice chaos --runtime lambda": _chaos_options,
    "sluice dev --worker words=sluice_dev.examples_team": lambda tmp: DevOptions(
        state_dir=tmp, team_workers=(("words", "sluice_dev.examples_team"),)),
}


def _prepared(options: DevOptions) -> tuple[DevStack, dict[str, Function]]:
    dev = DevStack(options)
    functions = dev.prepare(LOCAL, "http://127.0.0.1:7005")
    return dev, {f.name: f for f in functions}


Difference = tuple[str, str, str, str]  # function, field, template value, local value


def _differences(dev: DevStack, functions: dict[str, Function]) -> list[Difference]:
    """Every field where the local stack differs from the template."""
    found = []
    for logical_id, name in deployed.NAMES.items():
        cfg, fn = dev.deploy.functions[logical_id], functions[name]
        if fn.timeout_ms != cfg.timeout_s * 1000:
            found.append((logical_id, "Timeout", str(cfg.timeout_s), f"{fn.timeout_ms / 1000:g}"))
        memory = fn.env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
        if memory != str(cfg.memory_mb):
            found.append((logical_id, "MemorySize", str(cfg.memory_mb), str(memory)))
        if fn.max_concurrency != cfg.reserved_concurrency:
            found.append((logical_id, "ReservedConcurrentExecutions", str(cfg.reserved_concurrency),
                          str(fn.max_concurrency)))
        found += _env_differences(logical_id, cfg.env, fn.env)
    return found + _schedule_differences(dev)


def _team_differences(dev: DevStack, functions: dict[str, Function]) -> list[Difference]:
    """The same comparison for each team's worker function, against its own template."""
    found = []
    for team, (_module, deploy) in dev.teams.items():
        (cfg,) = deploy.functions.values()
        fn, lid = functions[f"sluice-worker-{team}"], f"{cfg.logical_id}[{team}]"
        if fn.timeout_ms != cfg.timeout_s * 1000:
            found.append((lid, "Timeout", str(cfg.timeout_s), f"{fn.timeout_ms / 1000:g}"))
        if fn.env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE") != str(cfg.memory_mb):
            memory = str(fn.env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"))
            found.append((lid, "MemorySize", str(cfg.memory_mb), memory))
        if fn.max_concurrency != cfg.reserved_concurrency:
            found.append((lid, "ReservedConcurrentExecutions", str(cfg.reserved_concurrency),
                          str(fn.max_concurrency)))
        found += _env_differences(lid, cfg.env, fn.env)
        periods = sorted(p for p, a in dev._timers() if a == dev.invoke_safety_net)
        for sched in cfg.schedules:  # drained by the local safety net, grouped by route
            if sched.enabled and rate_seconds(sched.expression) not in periods:
                found.append((lid, f"Events.{sched.name}", sched.expression, str(periods)))
            found.append((lid, f"Events.{sched.name}.Input", str(sched.input), "its routed queues with work"))
    return found


def _env_differences(logical_id: str, template: Any, local: Any) -> list[Difference]:
    found = []
    for var, value in template.items():
        if isinstance(value, Resource):
            if var not in deployed.BINDINGS:
                found.append((logical_id, f"Environment.{var}", str(value), str(local.get(var))))
        elif local.get(var) != value:
            found.append((logical_id, f"Environment.{var}", value, str(local.get(var))))
    for var in set(local) - set(template) - PROCESS_PLUMBING - set(deployed.BINDINGS):
        found.append((logical_id, f"Environment.{var}", "(unset)", local[var]))
    return found


def _schedule_differences(dev: DevStack) -> list[Difference]:
    found = []
    timers = dev._timers()
    for logical_id, action in (("RelayFunction", dev.invoke_relay),
                               ("WorkerFunction", dev.invoke_safety_net)):
        cfg = dev.deploy.functions[logical_id]
        periods = sorted(p for p, a in timers if a == action)
        for s in cfg.schedules:
            if s.enabled and rate_seconds(s.expression) not in periods:
                found.append((logical_id, f"Events.{s.name}", s.expression, str(periods)))
            if s.enabled and s.input is not None:  # the local safety net computes its queues
                found.append((logical_id, f"Events.{s.name}.Input", str(s.input), "every queue with work"))
        if len(periods) != sum(1 for s in cfg.schedules if s.enabled):
            found.append((logical_id, "Events", str(len(cfg.schedules)), str(len(periods))))
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_local_difference_from_the_template_is_a_named_override(case: str, tmp_path: Path) -> None:
    dev, functions = _prepared(CASES[case](tmp_path))
    named = {(o.function, o.field) for o in dev.overrides}
    differences = _differences(dev, functions) + _team_differences(dev, functions)
    unnamed = [d for d in differences if (d[0], d[1]) not in named]
    assert not unnamed, f"{case}: differences from template.yaml that are not named overrides: {unnamed}"
    # And no override is named for a field that does not differ (the printed list is honest).
    real = {(d[0], d[1]) for d in differences}
    assert {(o.function, o.field) for o in dev.overrides} <= real
    print(f"\n{case}:", *[o.line() for o in dev.overrides], sep="\n  ")


def test_sluice_dev_keeps_no_private_worker_timeout(tmp_path: Path) -> None:
    """Before issue 14 the local worker ran with a private 900 s timeout; it is the template's now."""
    dev, functions = _prepared(DevOptions(state_dir=tmp_path))
    worker = functions["sluice-worker"]
    expected = int(cfn.parameters(cfn.template())["WorkerTimeoutSeconds"])
    assert worker.timeout_ms == expected * 1000
    assert worker.env["SLUICE_FUNCTION_TIMEOUT_S"] == str(expected)
    assert not [o for o in dev.overrides if o.field == "Timeout"]


def test_an_override_changes_the_value_and_is_printed(tmp_path: Path) -> None:
    dev, functions = _prepared(DevOptions(state_dir=tmp_path, worker_timeout_s=60, why="a test"))
    assert functions["sluice-worker"].timeout_ms == 60_000
    assert functions["sluice-worker"].env["SLUICE_FUNCTION_TIMEOUT_S"] == "60"
    lines = [o.line() for o in dev.overrides]
    assert "WorkerFunction.Timeout: 300 -> 60  (a test)" in lines


def test_config_env_values_reach_the_functions(tmp_path: Path) -> None:
    _, functions = _prepared(DevOptions(state_dir=tmp_path, config_env="prod"))
    assert functions["sluice-worker"].env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "1024"
    assert functions["sluice-worker"].env["SLUICE_KAFKA_PARTITIONS"] == "16"
    assert functions["sluice-relay"].env["SLUICE_RELAY_PARTITION_GROUPS"] == "2"


def test_the_template_reader_follows_the_raw_template() -> None:
    t = cfn.template()
    params = cfn.parameters(t)
    d = load()
    worker = d.functions["WorkerFunction"]
    assert worker.timeout_s == int(params["WorkerTimeoutSeconds"])
    assert worker.memory_mb == int(params["WorkerMemoryMB"])
    gateway = t["Resources"]["GatewayFunction"]["Properties"]
    assert d.functions["GatewayFunction"].timeout_s == gateway["Timeout"]
    assert d.functions["RelayFunction"].memory_mb == t["Globals"]["Function"]["MemorySize"]
    globals_env = t["Globals"]["Function"]["Environment"]["Variables"]
    assert set(globals_env) <= set(worker.env)
    assert worker.env["SLUICE_DEFAULT_LEASE_SECONDS"] == str(params["DefaultLeaseSeconds"])
    assert isinstance(worker.env["SLUICE_JOBS_TABLE"], Resource)
    (net,) = worker.schedules
    assert net.input == {"queues": ["default"], "batch": int(params["WorkerBatch"]), "source": "safety-net"}
    relay = d.functions["RelayFunction"]
    assert [s.enabled for s in relay.schedules] == [True, False, False, False]
    # two runs per partition group overlap at each hand-over (issue 18; docs/relay.md)
    assert relay.reserved_concurrency == 2 * int(params["RelayPartitionGroups"])
    assert relay.timeout_s == t["Resources"]["RelayFunction"]["Properties"]["Timeout"]


def test_the_template_reader_refuses_what_it_cannot_resolve(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not in the template: Nope"):
        load(overrides={"Nope": "1"})
    with pytest.raises(ConfigError, match=r"no \[staging.deploy.parameters\]"):
        load(config_env="staging")
    bad = tmp_path / "samconfig.toml"
    bad.write_text('[x.deploy.parameters]\nparameter_overrides = ["WorkerBatch"]\n')
    with pytest.raises(ConfigError, match="not Name=Value"):
        load(config_env="x", samconfig=bad)
    with pytest.raises(ConfigError, match="rate"):
        rate_seconds("cron(0 * * * ? *)")


@pytest.mark.parametrize(("override", "message"), [
    ({"WorkerTimeoutSeconds": "901"}, r"outside 10\.\.900"),
    ({"WorkerTimeoutSeconds": "ten"}, "not a number"),
    ({"CacheEngine": "memcached"}, "not one of valkey, redis"),
    ({"WorkerHandlersModule": "my-jobs"}, "does not match"),
    ({"SafetyNetQueues": "default,sluice-relay"}, "does not match"),
])
def test_a_value_cloudformation_would_refuse_is_refused(override: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(overrides=override)


def test_the_operator_allow_list_reaches_the_local_gateway_through_a_config_env(tmp_path: Path) -> None:
    """docs/api.md (Operator API, Locally): the allow-list is the template's OperatorPrincipalArns,
    so `sluice dev --config-env ENV` sets it. A SLUICE_OPERATOR_PRINCIPALS in the shell does not:
    the template's value (empty by default) wins, as for every other variable."""
    import shutil

    from sluice_dev.local.template import TEMPLATE

    shutil.copy(TEMPLATE, tmp_path / "template.yaml")
    arns = "arn:aws:iam::000000000000:role/operator,arn:aws:iam::000000000000:role/oncall"
    (tmp_path / "samconfig.toml").write_text(
        f'[ops.deploy.parameters]\nparameter_overrides = ["OperatorPrincipalArns={arns}"]\n')
    _, functions = _prepared(DevOptions(state_dir=tmp_path / "state", template=tmp_path / "template.yaml",
                                        config_env="ops"))
    assert functions["sluice-gateway"].env["SLUICE_OPERATOR_PRINCIPALS"] == arns
    _, plain = _prepared(DevOptions(state_dir=tmp_path / "plain"))
    # The template names nobody (it fails closed): locally the tooling's operator, a printed override.
    assert plain["sluice-gateway"].env["SLUICE_OPERATOR_PRINCIPALS"] == LOCAL_OPERATOR


def test_with_no_operator_named_sluice_dev_names_its_local_operator_as_an_override(tmp_path: Path) -> None:
    """Issue 27, item 3: the template's default names no operator; `sluice dev` names its local one
    (the console's X-Sluice-Local-Caller) as an Override row it prints, never silently."""
    stack, functions = _prepared(DevOptions(state_dir=tmp_path))
    rows = [r for r in stack.overrides if r.field == "Environment.SLUICE_OPERATOR_PRINCIPALS"]
    # The public function reads the list for the priority cap, the operator function for its routes.
    assert [(r.function, r.template, r.local) for r in rows] == [("GatewayFunction", "", LOCAL_OPERATOR),
                                                                 ("OperatorFunction", "", LOCAL_OPERATOR)]
    assert "OperatorPrincipalArns" in rows[0].reason
    assert functions["sluice-gateway"].env["SLUICE_OPERATOR_PRINCIPALS"] == LOCAL_OPERATOR


def test_sluice_dev_says_when_no_route_is_registered() -> None:
    """sluice dev registers every worker's queues as its routes, as a deploy does (DefaultWorkerRoutes);
    a handlers module with no handler registers none, and then nothing is refused at the door: said."""
    from sluice_dev.local.dev import NO_ROUTES_ROW, describe

    rows = describe({"routes": []})
    assert NO_ROUTES_ROW in rows and "PAYLOAD_INVALID" in NO_ROUTES_ROW[1]
    routed = describe({"routes": ["thumbnails -> sluice-worker (typed)"]})
    assert NO_ROUTES_ROW not in routed and ("route", "thumbnails -> sluice-worker (typed)") in routed


def test_the_relay_waits_longer_on_tansu_on_s3_and_says_why(tmp_path: Path) -> None:
    """Tansu on S3 returns only what it read within the fetch's max wait (a chaos run stalled at
    the relay's 100 ms); against a Kafka named in configuration the relay keeps its own setting."""
    from sluice_dev.local.dev import TANSU_FETCH_MAX_WAIT_MS

    dev, functions = _prepared(DevOptions(state_dir=tmp_path))
    assert functions["sluice-relay"].env["SLUICE_RELAY_FETCH_MAX_WAIT_MS"] == str(TANSU_FETCH_MAX_WAIT_MS)
    assert any(o.function == "RelayFunction" and "SLUICE_RELAY_FETCH_MAX_WAIT_MS" in o.field
               and "Tansu" in o.line() for o in dev.overrides)
    _, functions = _prepared(DevOptions(state_dir=tmp_path / "kafka", kafka_bootstrap="kafka.example:9092"))
    assert "SLUICE_RELAY_FETCH_MAX_WAIT_MS" not in functions["sluice-relay"].env


def test_built_functions_refuse_a_handlers_module_of_the_dev_tooling(tmp_path: Path) -> None:
    """The built layer holds no sluice_dev: the examples would fail in every worker; one clear error."""
    with pytest.raises(ConfigError, match=r"--artifacts runs the built functions.*sluice_dev\.examples"):
        DevStack(DevOptions(state_dir=tmp_path, artifacts=tmp_path / "build"))
    DevStack(DevOptions(state_dir=tmp_path, artifacts=tmp_path / "build", handlers=None))  # the template's
    DevStack(DevOptions(state_dir=tmp_path, artifacts=tmp_path / "build", handlers="jobs"))  # the team's own


def test_each_local_function_connects_as_its_own_redis_user(tmp_path: Path) -> None:
    """Issue 27: ``sluice dev`` gives each function its ACL user (as ElastiCache RBAC does), each
    ``--worker`` team a user for the queues routed to it; its own process keeps the tooling's."""
    from sluice.backends.redis import acl

    dev, functions = _prepared(CASES["sluice dev --worker words=sluice_dev.examples_team"](tmp_path))
    users = {f.name: f.env.get("SLUICE_REDIS_USERNAME") for f in functions.values()}
    # The split functions each connect as their own user (of their role: the operator's, or the
    # gateway's for internal calls and firings); the registrars (Sluice's, the team's) and the two functions
    # outside the VPC (the team map's, the scheduler's; issue 33) read no Redis.
    assert users == {"sluice-gateway": "sluice-gateway", "sluice-operator": "sluice-operator",
                     "sluice-internal": "sluice-internal", "sluice-firings": "sluice-firings",
                     "sluice-relay": "sluice-relay", "sluice-worker": "sluice-worker",
                     "sluice-worker-words": "sluice-worker-words", "sluice-registrar-words": None,
                     "sluice-registrar": None, "sluice-teams": None, "sluice-scheduler": None}
    passwords = {f.env["SLUICE_REDIS_PASSWORD"] for f in functions.values()
                 if f.env.get("SLUICE_REDIS_USERNAME")}
    assert len(passwords) == len(users) - 4  # one each (not the registrars, the team map or the scheduler)
    words = dev.redis_users["team:words"]
    from sluice.entry.worker import load_app

    handlers = load_app("sluice_dev.examples_team").handlers
    assert words.role is acl.WORKER and words.queues == tuple(sorted(handlers))
    assert dev.redis_users["RelayFunction"].role is acl.RELAY
    assert dev.settings is not None and dev.settings.redis_password is None
    assert dev.settings.redis_username is None


def test_the_template_reads_the_same_with_libyaml_as_with_pyyamls_own_parser() -> None:
    """``CfnLoader`` parses with libyaml where PyYAML has it (six times faster on template.yaml); the
    document, short-form tags included, is the one PyYAML's pure-Python SafeLoader makes."""
    import yaml

    from sluice_dev.local import template

    class Pure(yaml.SafeLoader):
        pass

    Pure.add_multi_constructor("!", template._construct)
    for path in (template.TEMPLATE, cfn.ROOT / "infra" / "worker.yaml", cfn.ROOT / "infra" / "team.yaml"):
        text = path.read_text()
        assert yaml.load(text, Loader=template.CfnLoader) == yaml.load(text, Loader=Pure), path
    assert template.CfnLoader.__mro__[1] is getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.mark.parametrize(("profile", "partitions", "groups", "payload"), [
    ("small", "8", "1", "2.0"), ("standard", "8", "1", "1.0"), ("large", "32", "4", "1.0")])
def test_each_profile_runs_locally_as_the_template_resolves_it(profile: str, partitions: str, groups: str,
                                                               payload: str) -> None:
    """`sluice dev --profile` (issue 33): the Profiles mapping reaches the functions (Fn::FindInMap), the
    functions admit the local API whichever front door the profile has, and small's API sends 2.0 events."""
    from sluice_dev.local import access
    from sluice_dev.local.dev import DevOptions, api_payload

    d = DevOptions(profile=profile, handlers=None).deploy()
    assert d.parameters["Profile"] == profile
    relay = d.functions["RelayFunction"].env
    assert (relay["SLUICE_KAFKA_PARTITIONS"], relay["SLUICE_RELAY_PARTITION_GROUPS"]) == (partitions, groups)
    policy = access.bind(d.resource_policies["GatewayFunction"], access.names_for(d, {}))
    arns = policy["Statement"][0]["Condition"]["ArnLike"]["aws:SourceArn"]
    assert arns[0] == f"arn:aws:execute-api:us-east-1:000000000000:{access.API_ID}/*/*/v1/queues/*"
    assert api_payload(profile) == payload


def test_a_teams_module_in_its_templates_code_uri_is_found_and_on_its_functions_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/teams.md's layout (worker.yaml next to worker/, which holds jobs.py): `sluice dev --worker
    media=jobs --worker-template worker.yaml` from the team's folder stopped with "No module named
    'jobs'" (session 36's walk), while `sluice check --template worker.yaml jobs` found it in the CodeUri."""
    import shutil
    import sys

    team = tmp_path / "team"
    (team / "worker").mkdir(parents=True)
    shutil.copyfile(cfn.ROOT / "infra" / "worker.yaml", team / "worker.yaml")
    module = f"walk_dev_jobs_{tmp_path.name.replace('-', '_')}"  # unique: imported once per process
    (team / "worker" / f"{module}.py").write_text(
        "import sluice\napp = sluice.Worker()\n\n"
        "@app.handler('avatar-cleanup')\ndef cleanup(job, ctx):\n    return None\n")
    monkeypatch.chdir(team)
    monkeypatch.setattr(sys, "path", list(sys.path))
    dev = DevStack(DevOptions(state_dir=tmp_path / ".sluice", team_workers=(("media", module),),
                              team_template=Path("worker.yaml")))
    dev._check_handlers()
    functions = {f.name: f for f in dev.prepare(LOCAL, "http://127.0.0.1:7005")}
    path = functions["sluice-worker-media"].env["PYTHONPATH"].split(":")
    assert path[0] == str((team / "worker").resolve())
    assert str((team / "worker").resolve()) not in functions["sluice-worker"].env["PYTHONPATH"]
