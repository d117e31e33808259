"""README.md holds to its word: users first, and every command, snippet and link in it works.

What runs without a stack is checked here: each ``sluice`` command line parses against the CLI as
written (a renamed command or option fails), each ``make`` target exists, the Python compiles and the
first handler registers and runs, the template parameters and outputs it names exist, and every doc
(and section) it points at resolves (the files it names in backticks: tests/unit/test_doc_names.py).
tests/stack/test_readme_stack.py runs the first handler's commands on `sluice dev`.
"""

from __future__ import annotations

import re
import runpy
import shlex
import types
from pathlib import Path
from typing import Any

import click
import pytest

from sluice_dev.cli import main
from tests.tooling.readme_blocks import README, ROOT, blocks, python_block, shell_lines, sluice_argv

TEXT = README.read_text(encoding="utf-8")
# In this order (issue 31, item 8): what it is and when to pick it, a first handler, the demo, the
# local stack, deploying, operating, and then contributing.
SECTIONS = ("Sluice or SQS + Lambda?", "A first handler", "`make demo`", "`sluice dev`", "Deploying",
            "Operating", "Contributing")


def resolve(argv: list[str]) -> tuple[click.Command, list[str], click.Context]:
    """Parse ``sluice <argv>`` as click would, down to the last subcommand; raises on a bad line."""
    ctx = main.make_context("sluice", list(argv), resilient_parsing=False)
    command: click.Command = main
    rest = [*ctx.protected_args, *ctx.args]
    while isinstance(command, click.Group):
        assert rest, f"sluice {shlex.join(argv)}: names no command of {ctx.command_path}"
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        ctx = sub.make_context(name, rest, parent=ctx)
        command, rest = sub, [*ctx.protected_args, *ctx.args] if isinstance(sub, click.Group) else []
    return command, rest, ctx


def sluice_lines() -> list[list[str]]:
    return [argv for b in blocks() if b.lang == "bash" for line in shell_lines(b)
            if (argv := sluice_argv(line)) is not None]


def test_the_readme_is_in_the_order_a_user_needs_it() -> None:
    headings = re.findall(r"^## (.+)$", TEXT, re.M)
    missing = [s for s in SECTIONS if s not in headings]
    assert not missing, missing
    assert [h for h in headings if h in SECTIONS] == list(SECTIONS), headings


def test_the_first_screen_states_the_idle_cost_the_deploy_time_and_the_egress() -> None:
    first_screen = "\n".join(TEXT.splitlines()[:30])
    assert re.search(r"\$6\d\d.{0,10}a month idle", first_screen), "the idle cost"  # $660-685 (issue 33)
    assert "25\N{EN DASH}35 minutes" in first_screen, "the first deploy's time"
    assert "no internet egress" in first_screen and "NAT" in first_screen, "the handlers' egress"


def test_the_idle_cost_it_states_is_the_one_docs_cost_md_computes() -> None:
    cost = (ROOT / "docs" / "cost.md").read_text(encoding="utf-8")
    fixed = cost[cost.index("## Fixed cost per month"):]
    default = re.search(r"\*\*Total\*\* \| \| \*\*(\d+)\.\d\d\*\*", fixed)
    dev = re.search(r"≈ \*\*\$(\d+)/month\*\* idle", fixed)
    assert default and dev, "docs/cost.md's fixed cost table moved: update this test and the README"
    stated = re.search(r"about \$(\d+)[-\N{EN DASH}](\d+) a month idle", TEXT)
    assert stated, "the README's idle cost"
    low, high = int(stated.group(1)), int(stated.group(2))
    assert low <= int(dev.group(1)) <= high and low <= int(default.group(1)) <= high + 5


def test_a_default_deploy_has_no_nat_gateway_as_the_readme_says() -> None:
    """Every NAT gateway or internet gateway in any template is created only when HandlerEgress asks for
    one (issue 33): at every template's defaults, none is."""
    from tests.infra import cfn

    seen = 0
    for path in (ROOT / "template.yaml", *sorted((ROOT / "infra").glob("*.yaml"))):
        doc = cfn.load(path)
        conds = cfn.conditions(doc, cfn.parameters(doc))
        for name, r in doc.get("Resources", {}).items():
            if r["Type"] in ("AWS::EC2::NatGateway", "AWS::EC2::InternetGateway"):
                seen += 1
                assert "Condition" in r and not conds[r["Condition"]], f"{path.name}: {name}"
    assert seen >= 4  # infra/network.yaml's: an internet gateway and a NAT gateway per AZ
    assert "`HandlerEgress=none`" in TEXT


def test_the_two_setup_commands_of_a_fresh_machine_are_there() -> None:
    lines = [line for b in blocks() if b.lang == "bash" and b.section == "`make demo`"
             for line in shell_lines(b)]
    assert lines[:2] == ["make demo", "make test"]


def test_every_make_target_it_names_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    named = {m for m in re.findall(r"`make (\w[\w-]*)`|^make (\w[\w-]*)", TEXT, re.M) for m in m if m}
    named |= {line.split()[1] for b in blocks() if b.lang == "bash" for line in shell_lines(b)
              if line.startswith("make ")}
    assert {"demo", "test", "bench", "chaos", "openapi", "build"} <= named
    assert named <= targets, named - targets


@pytest.mark.parametrize("argv", sluice_lines(), ids=shlex.join)
def test_every_sluice_command_line_parses_as_written(argv: list[str]) -> None:
    command, rest, _ = resolve(argv)
    assert not isinstance(command, click.Group)
    assert rest == [], rest


def test_a_renamed_command_or_option_fails_the_check() -> None:
    with pytest.raises(click.UsageError):
        resolve(["enqueue", "greet", "--payload", "{}", "--wiat"])
    with pytest.raises(click.UsageError):
        resolve(["queue", "pasue", "greet"])
    with pytest.raises(click.UsageError):
        resolve(["enqueue", "greet"])  # --payload is required


def test_every_sluice_command_named_in_the_prose_exists_with_its_options() -> None:
    spans = re.findall(r"`(sluice [^`]+)`", TEXT)
    assert len(spans) >= 5
    for span in spans:
        words = shlex.split(span)[1:]
        command: click.Command = main
        path: list[str] = []
        while isinstance(command, click.Group) and words and not words[0].startswith("-"):
            sub = command.commands.get(words[0])
            assert sub is not None, f"`{span}`: no command {' '.join([*path, words[0]])}"
            command, path, words = sub, [*path, words.pop(0)], words
        options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--json", "--help"}
        for word in words:
            if word.startswith("-"):
                assert word.split("=")[0] in options, f"`{span}`: sluice {' '.join(path)} has no {word}"


def test_every_python_block_compiles() -> None:
    python = [b for b in blocks() if b.lang == "python"]
    assert len(python) >= 2
    for block in python:
        compile(block.text, f"README.md ({block.section})", "exec")


def test_the_first_handler_registers_and_runs(tmp_path: Path) -> None:
    source = python_block("# functions/worker/jobs.py")
    path = tmp_path / "jobs.py"
    path.write_text(source, encoding="utf-8")
    module = runpy.run_path(str(path), run_name="jobs")
    import sluice

    app = module["app"]
    assert isinstance(app, sluice.Worker)
    assert set(app.handlers) == {"greet"}
    progress: list[tuple[float, str]] = []
    ctx: Any = types.SimpleNamespace(token=3, progress=lambda f, d="": progress.append((f, d)))
    job = sluice.Job(job_id="j", queue="greet", payload={"name": "Ada"}, attempt=2, max_attempts=5)
    result = app.handlers["greet"].fn(job, ctx)
    assert result == {"greeting": "Hello, Ada!", "attempt": 2, "token": 3}
    assert progress == [(0.5, "composing")]


def test_the_client_snippet_calls_the_client_as_it_is() -> None:
    import inspect

    import sluice

    source = python_block("sluice.Client(")
    calls = {"Client": sluice.Client, "enqueue": sluice.Client.enqueue, "wait": sluice.Client.wait}
    for name, fn in calls.items():
        match = re.search(rf"\b{name}\(([^()]*(?:\([^()]*\)[^()]*)*)\)", source)
        assert match, name
        keywords = re.findall(r"\b(\w+)=", match.group(1))
        params = inspect.signature(fn).parameters
        assert all(k in params for k in keywords), (name, keywords)


def test_the_template_parameters_and_outputs_it_names_exist() -> None:
    template = (ROOT / "template.yaml").read_text(encoding="utf-8")

    def section(name: str) -> set[str]:
        start = template.index(f"\n{name}:\n") + len(name) + 3
        end = re.compile(r"^\w+:", re.M).search(template, start)
        return set(re.findall(r"^  (\w+):", template[start:end.start() if end else None], re.M))

    parameters, outputs = section("Parameters"), section("Outputs")
    for name in ("WorkerHandlersModule", "DeployerPrincipalArns", "VpcId", "HandlerEgress"):
        assert name in TEXT and name in parameters, name
    for name in ("ApiUrl", "RedisEndpoint", "JobsTableName", "DashboardUrl", "AlarmTopicArn"):
        assert name in TEXT and name in outputs, name
    samconfig = (ROOT / "samconfig.toml").read_text(encoding="utf-8")
    assert "[dev.deploy.parameters]" in samconfig and "parameter_overrides = [" in samconfig


def test_every_doc_and_section_it_points_at_resolves() -> None:
    named = set(re.findall(r"\bdocs/[\w./-]+\.(?:md|png)", TEXT))
    named |= {t for t in re.findall(r"\]\(([^)#]+)", TEXT) if not t.startswith("http")}
    assert len(named) >= 10
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, missing
    for doc, section in re.findall(r"\b(docs/[\w-]+\.md), \"([^\"]+)\"", TEXT):
        headings = re.findall(r"^#+ (.+)$", (ROOT / doc).read_text(encoding="utf-8"), re.M)
        section = " ".join(section.split()).lower()
        assert any(section in h.lower() for h in headings), f"{doc} has no section {section!r}"


def _queues(text: str) -> set[str]:
    """The queues a snippet enqueues on: the CLI's, the client's and the HTTP API's."""
    patterns = (r"sluice enqueue ([\w-]+)", r"\.enqueue\(\"([\w-]+)\"", r"/v1/queues/([\w-]+)/jobs")
    return {queue for pattern in patterns for queue in re.findall(pattern, text)}


def test_the_aws_snippets_enqueue_on_a_queue_the_deployed_handlers_serve() -> None:
    """A default deploy has no `echo` (the examples are dev tooling, never in the layer): a job on
    it dead-lettered, or is refused once the deploy's routes name the handlers' queues."""
    module = python_block("# functions/worker/jobs.py")
    served = set(re.findall(r"@app\.handler\(\"([\w-]+)\"", module))
    deploying = TEXT[TEXT.index("## Deploying"):TEXT.index("## Operating")]
    assert _queues(deploying) and _queues(deploying) <= served, _queues(deploying)
    module_name = re.match(r"# functions/worker/(\w+)\.py", module)
    assert module_name, "the first handler's block names its file first"
    assert f'"WorkerHandlersModule={module_name.group(1)}"' in deploying  # the module the deploy loads
    assert f"sluice check --config-env dev {module_name.group(1)}" in deploying
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    handlers = deploy[deploy.index("## 4. Your handlers"):deploy.index("## 5. A first job")]
    first_job = deploy[deploy.index("## 5. A first job"):deploy.index("## 6. Operating")]
    shown = set(re.findall(r"@app\.handler\(\"([\w-]+)\"", handlers))
    assert _queues(first_job) and _queues(first_job) <= shown, (_queues(first_job), shown)


def test_sam_deploys_command_line_overrides_replace_the_environments_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Why README.md and docs/deploy.md put DeployerPrincipalArns and WorkerHandlersModule in
    samconfig.toml: `sam deploy --config-env dev --parameter-overrides X=Y` drops dev's own list (its
    reserved concurrency off, its small nodes). If SAM CLI starts merging them, this fails: say so there."""
    from click.testing import CliRunner
    from samcli.commands.deploy import command as deploy

    for name in ("samconfig.toml", "template.yaml"):
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    seen: list[dict[str, str]] = []
    monkeypatch.setattr(deploy, "do_cli", lambda *args, **_: seen.extend(  # the overrides, not the tags
        a for a in args if isinstance(a, dict) and a and "project" not in a))
    for extra in ([], ["--parameter-overrides", "DeployerPrincipalArns=arn:aws:iam::123456789012:role/x"]):
        result = CliRunner().invoke(deploy.cli, ["--config-env", "dev", *extra], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    from_file, from_command_line = seen
    assert from_file["ReserveRelayConcurrency"] == "false"
    assert from_command_line == {"DeployerPrincipalArns": "arn:aws:iam::123456789012:role/x"}
