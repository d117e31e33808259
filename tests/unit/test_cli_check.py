"""``sluice check``: per queue, what a deploy of the template gives it; non-zero where one cannot run."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sluice_dev.cli import main
from tests.infra import cfn


def _template_with(tmp_path: Path, overrides: list[str]) -> Path:
    template = tmp_path / "template.yaml"
    shutil.copyfile(cfn.TEMPLATE, template)
    quoted = ", ".join(f'"{o}"' for o in overrides)
    (tmp_path / "samconfig.toml").write_text(f"[small.deploy.parameters]\nparameter_overrides = [{quoted}]\n")
    return template


def test_at_the_template_defaults_every_example_fits() -> None:
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "sluice_dev.examples"])
    assert out.exit_code == 0, out.output
    rows = {line.split()[0]: line.split() for line in out.output.splitlines()[2:]}
    assert set(rows) == {"echo", "hash", "notify", "ledger", "flaky", "slow", "thumbnails", "fanout",
                         "square", "sum"}
    # echo has no timeout_s: its default fits the 300 s function (the bug: 300 s did not).
    assert rows["echo"][1:3] == ["268s", "default"] and rows["echo"][-1] == "yes"
    assert rows["notify"][1:3] == ["30s", "timeout_s"] and rows["notify"][3:5] == ["30s", "10"]


def test_a_handler_that_cannot_fit_the_configured_worker_exits_non_zero(tmp_path: Path) -> None:
    template = _template_with(tmp_path, ["WorkerTimeoutSeconds=20", "WorkerBatch=5"])
    args = ["check", "--template", str(template), "--config-env", "small", "sluice_dev.examples"]
    out = CliRunner(mix_stderr=False).invoke(main, args)
    assert out.exit_code == 1
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert rows["notify"][-1] == "NO" and rows["slow"][-1] == "NO"
    assert rows["echo"][-1] == "yes" and rows["echo"][4] == "5"
    assert "cannot run: notify, slow" in out.stderr and "16 s" in out.stderr


def test_an_unknown_config_env_or_module_is_one_clear_error(tmp_path: Path) -> None:
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "--config-env", "nowhere",
                                                    "sluice_dev.examples"])
    assert out.exit_code == 1 and "no [nowhere.deploy.parameters]" in out.stderr
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "sluice.no_such_handlers"])
    assert out.exit_code == 1 and "cannot import the handlers module" in out.stderr


TEAM = str(cfn.ROOT / "infra" / "worker.yaml")
LAYER = "SluiceLayerArn=arn:aws:lambda:us-east-1:123456789012:layer:sluice:7"


def test_a_teams_worker_template_is_checked_the_same_way() -> None:
    """Issue 14/15: a team's own worker function takes its configuration from its own template."""
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "--template", TEAM, "--parameter", LAYER,
                                                    "sluice_dev.examples"])
    assert out.exit_code == 0, out.output + out.stderr
    assert out.stdout.startswith("TeamWorkerFunction in ") and "Timeout 300 s" in out.stdout
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert rows["echo"][1:3] == ["268s", "default"] and rows["slow"][-1] == "yes"
    small = ["check", "--template", TEAM, "--parameter", LAYER, "--parameter", "WorkerTimeoutSeconds=20",
             "--parameter", "WorkerBatch=4", "sluice_dev.examples"]
    out = CliRunner(mix_stderr=False).invoke(main, small)
    assert out.exit_code == 1 and "cannot run: notify, slow" in out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert rows["echo"][4] == "4" and rows["echo"][-1] == "yes"


def test_a_team_template_needs_its_layer_parameter_and_refuses_a_bad_value() -> None:
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "--template", TEAM, "sluice_dev.examples"])
    assert out.exit_code == 1 and "SluiceLayerArn has no default" in out.stderr
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "--template", TEAM, "--parameter",
                                                    "SluiceLayerArn=not-an-arn", "sluice_dev.examples"])
    assert out.exit_code == 1 and "does not match" in out.stderr
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "--parameter", "oops", "sluice_dev.examples"])
    assert out.exit_code == 1 and "not NAME=VALUE" in out.stderr


def test_the_handlers_module_is_found_in_the_functions_code_uri_as_deployed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/teams.md's layout: worker.yaml copied next to worker/, which holds jobs.py (its CodeUri).
    From the team's folder, `sluice check --template worker.yaml jobs` imports worker/jobs.py, as
    Lambda does from /var/task; it used to fail with "No module named 'jobs'"."""
    team = tmp_path / "team"
    (team / "worker").mkdir(parents=True)
    shutil.copyfile(TEAM, team / "worker.yaml")
    module = f"walk_team_jobs_{tmp_path.name.replace('-', '_')}"  # unique: imported once per process
    (team / "worker" / f"{module}.py").write_text(
        "import sluice\napp = sluice.Worker()\n\n"
        "@app.handler('avatar-cleanup')\ndef cleanup(job, ctx):\n    return None\n")
    monkeypatch.chdir(team)
    monkeypatch.setattr(sys, "path", list(sys.path))
    args = ["check", "--template", "worker.yaml", "--parameter", LAYER, module]
    out = CliRunner(mix_stderr=False).invoke(main, args)
    assert out.exit_code == 0, out.output + out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert rows["avatar-cleanup"][1:3] == ["268s", "default"] and rows["avatar-cleanup"][-1] == "yes"


def test_an_empty_operator_list_is_a_warning_naming_the_parameter(tmp_path: Path) -> None:
    """Issue 27, item 3: the template's default names no operator, which fails closed; sluice check says so
    (a warning, exit 0), and says nothing once operators are named."""
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "sluice_dev.examples"])
    assert out.exit_code == 0, out.output
    assert "warning: OperatorPrincipalArns is empty" in out.stderr and "refuses everyone" in out.stderr
    template = _template_with(tmp_path, ["OperatorPrincipalArns=arn:aws:iam::123456789012:role/ops"])
    named = CliRunner(mix_stderr=False).invoke(main, ["check", "--template", str(template), "--config-env",
                                                      "small", "sluice_dev.examples"])
    assert named.exit_code == 0 and "OperatorPrincipalArns" not in named.stderr
    as_json = CliRunner(mix_stderr=False).invoke(main, ["--json", "check", "sluice_dev.examples"])
    assert any("OperatorPrincipalArns" in w for w in json.loads(as_json.stdout)["warnings"])
    team = CliRunner(mix_stderr=False).invoke(main, ["check", "--template", TEAM, "--parameter", LAYER,
                                                     "sluice_dev.examples_team"])
    assert "OperatorPrincipalArns" not in team.stderr  # a team's template has no operators to name


def test_a_retention_or_key_rotation_that_does_not_honour_the_life_bound_is_refused(
        tmp_path: Path) -> None:
    """Issue 27, item 7: the job id key window must cover the job life bound and Kafka's retention,
    and items must outlive the bound; sluice check refuses a deploy where one does not."""
    from sluice_dev.cli.check import life_bound

    at_defaults = {"KafkaRetentionHours": "336", "RetentionDays": "14"}
    assert life_bound(at_defaults, {"JobIdSecretRotation": "rate(30 days)"}) == []
    assert life_bound({}, {}) == []  # a team's worker template: none of these
    short = life_bound(at_defaults, {"JobIdSecretRotation": "rate(7 days)"})
    assert len(short) == 2 and all("key window" in why for why in short)
    assert life_bound({"KafkaRetentionHours": "8760", "RetentionDays": "14"},
                      {"JobIdSecretRotation": "rate(30 days)"})
    template = tmp_path / "template.yaml"
    text = cfn.TEMPLATE.read_text()
    template.write_text(text.replace("ScheduleExpression: rate(30 days)\n\n  SharedLayer",
                                     "ScheduleExpression: rate(10 days)\n\n  SharedLayer"))
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "--template", str(template),
                                                    "sluice_dev.examples"])
    assert out.exit_code == 1 and "the job life bound is not honoured" in out.stderr
    assert "key window" in out.stderr
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "--parameter", "RetentionDays=7",
                                                    "sluice_dev.examples"])
    assert out.exit_code == 1 and "RetentionDays 7" in out.stderr


def test_check_warns_that_a_deploy_without_the_deployer_roles_is_refused() -> None:
    """Issue 27: DeployerPrincipalArns has no safe default; the template's rule refuses it empty,
    and `sluice check` says so before a deploy does."""
    from sluice_dev.cli.check import NO_DEPLOYERS, deployment_warnings

    assert NO_DEPLOYERS in deployment_warnings({"DeployerPrincipalArns": ""})
    named = {"DeployerPrincipalArns": "arn:aws:iam::123456789012:role/infra-deploy"}
    assert NO_DEPLOYERS not in deployment_warnings(named)
    assert NO_DEPLOYERS not in deployment_warnings({})  # a team's template has no such parameter


def test_a_byte_budget_total_the_node_cannot_hold_is_refused_and_one_that_fits_passes() -> None:
    """Issue 28, item 4: RedisBudgetBytes against CacheNodeType's memory (sluice.core.limits)."""
    over = CliRunner(mix_stderr=False).invoke(main, ["check", "--parameter", "RedisBudgetBytes=4294967296",
                                                     "sluice_dev.examples"])
    assert over.exit_code == 1 and "byte budgets do not fit Redis" in over.stderr
    assert "cache.t4g.small" in over.stderr
    bigger = CliRunner(mix_stderr=False).invoke(main, ["check", "--parameter", "RedisBudgetBytes=4294967296",
                                                       "--parameter", "CacheNodeType=cache.r7g.large",
                                                       "sluice_dev.examples"])
    assert bigger.exit_code == 0, bigger.stderr
    fine = CliRunner(mix_stderr=False).invoke(main, ["check", "sluice_dev.examples"])
    assert fine.exit_code == 0 and "RedisBudgetBytes" not in fine.stderr
    many = CliRunner(mix_stderr=False).invoke(main, ["check", "--parameter", "QueueBudgetBytes=268435456",
                                                     "sluice_dev.examples"])
    assert many.exit_code == 0 and "10 queues x QueueBudgetBytes 268435456" in many.stderr


def test_the_digest_finds_the_handlers_module_in_the_code_uri_as_the_deploy_line_runs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/teams.md's deploy line, `Declarations=$(sluice routes digest jobs)`, run from the team's folder
    (worker.yaml next to worker/jobs.py): it failed with "No module named 'jobs'" and the shell passed
    an empty digest, which the template's pattern admits (session 36's walk)."""
    team = tmp_path / "team"
    (team / "worker").mkdir(parents=True)
    shutil.copyfile(TEAM, team / "worker.yaml")
    module = f"walk_digest_jobs_{tmp_path.name.replace('-', '_')}"  # unique: imported once per process
    (team / "worker" / f"{module}.py").write_text(
        "import sluice\napp = sluice.Worker()\n\n"
        "@app.handler('avatar-cleanup')\ndef cleanup(job, ctx):\n    return None\n")
    monkeypatch.chdir(team)
    monkeypatch.setattr(sys, "path", list(sys.path))
    out = CliRunner(mix_stderr=False).invoke(main, ["routes", "digest", module])
    assert out.exit_code == 0, out.output + out.stderr
    assert out.stdout.strip().startswith("sha256-") and len(out.stdout.strip()) == len("sha256-") + 32
    elsewhere = CliRunner(mix_stderr=False).invoke(main, ["routes", "digest", "--code", "nowhere",
                                                          f"{module}_missing"])
    assert elsewhere.exit_code == 1 and "cannot import the handlers module" in elsewhere.stderr


def test_a_team_template_whose_safety_net_misses_the_handlers_queues_is_a_warning() -> None:
    """infra/worker.yaml's Queues defaults to `jobs`: deployed with the default, a team's safety net drains
    none of its queues, and nothing said so (session 36's walk). Named, the warning goes."""
    base = ["check", "--template", TEAM, "--parameter", LAYER]
    out = CliRunner(mix_stderr=False).invoke(main, [*base, "sluice_dev.examples_team"])
    assert out.exit_code == 0, out.output + out.stderr
    assert "warning: the safety net (Queues: jobs) does not drain or reap word-batch, word-count, " \
        "word-total" in out.stderr
    assert "Queues=word-batch,word-count,word-total" in out.stderr
    some = CliRunner(mix_stderr=False).invoke(main, [*base, "--parameter", "Queues=word-count,other",
                                                     "sluice_dev.examples_team"])
    assert "(Queues: word-count,other) does not drain or reap word-batch, word-total:" in some.stderr
    every = ["--parameter", "Queues=word-count,word-batch,word-total,other"]
    named = CliRunner(mix_stderr=False).invoke(main, [*base, *every, "sluice_dev.examples_team"])
    assert named.exit_code == 0 and "safety net" not in named.stderr
    sluice = CliRunner(mix_stderr=False).invoke(main, ["check", "sluice_dev.examples"])
    assert "safety net" not in sluice.stderr  # Sluice's own template: SafetyNetQueues, not this warning


def test_a_stack_and_team_name_too_long_for_aws_together_are_refused_before_the_deploy() -> None:
    """Session 36's walk: SluiceStackName admits 41 characters and TeamName 21, so the team's registrar
    `<stack>-registrar-<team>` could be 73 characters, past Lambda's and IAM's 64: the deploy failed
    half-way. 53 together is the most; `sluice check` says so before."""
    stack = "s" + "x" * 31  # 32
    fits = ["check", "--template", TEAM, "--parameter", LAYER, "--parameter", f"SluiceStackName={stack}",
            "--parameter", f"TeamName={'t' * 21}", "sluice_dev.examples_team"]
    out = CliRunner(mix_stderr=False).invoke(main, fits)
    assert out.exit_code == 0, out.stderr
    over = [*fits[:-2], f"TeamName={'t' * 21}", "--parameter", f"SluiceStackName={stack}y",
            "sluice_dev.examples_team"]
    out = CliRunner(mix_stderr=False).invoke(main, over)
    assert out.exit_code == 1
    assert f"'{stack}y-registrar-{'t' * 21}', 65 characters: AWS takes at most 64" in out.stderr
    assert "53 characters together" in out.stderr and "worker function" not in out.stderr
