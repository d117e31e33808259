"""``sluice cost``: a month line by line next to SQS + Lambda; hostile inputs are usage errors (exit 2)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sluice.core.errors import InvalidInput
from sluice_dev.cli import main
from sluice_dev.cli.cost import parse_count


def run(*args: str) -> tuple[int, str, str]:
    out = CliRunner(mix_stderr=False).invoke(main, ["cost", *args])
    return out.exit_code, out.stdout, out.stderr


@pytest.mark.parametrize(("text", "jobs"), [("100M", 100e6), ("1B", 1e9), ("250k", 250e3), ("250K", 250e3),
                                            ("1.5m", 1.5e6), ("1,000,000", 1e6), ("1_000", 1e3), ("2e6", 2e6),
                                            ("0", 0.0), (" 7 ", 7.0)])
def test_counts_take_suffixes(text: str, jobs: float) -> None:
    assert parse_count(text) == jobs


@pytest.mark.parametrize("text", ["", "M", "1MB", "ten", "nan", "inf", "1e", "0x10", "1..2", "--5"])
def test_what_is_not_a_count_is_refused(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_count(text)


def test_the_month_line_by_line_next_to_sqs() -> None:
    code, out, err = run("--jobs-per-month", "100M", "--handler-seconds", "0.2")
    assert code == 0, err
    assert out.startswith("profile standard, 100,000,000 jobs a month (38.1 a second), handler 0.2 s")
    sluice, sqs = out.split("\nSQS + Lambda")
    rows = {line[2:46].strip(): line[46:].split() for line in sluice.splitlines() if line.startswith("  ")}
    assert rows["MSK Serverless cluster"] == ["547.50", "5.48"]
    assert rows["DynamoDB writes"] == ["187.50", "1.88"]  # 3 WRU (5 before issue 33, 4 before its one put)
    assert rows["Handler run time"] == ["266.67", "2.67"]
    # 684.30 fixed + 723.29 variable (807.44 before the gateway's log lines went, 785.79 before the
    # idempotency record's one write) + 266.67 of handler
    assert rows["total"] == ["1,674.26", "16.74"]
    their = {line[2:46].strip(): line[46:].split() for line in sqs.splitlines() if line.startswith("  ")}
    assert their["Handler run time"] == ["266.67", "2.67"] and their["total"] == ["932.74", "9.33"]
    assert "Sluice costs 1.79× SQS + Lambda for this work" in out  # 1,674.26 / 932.74


def test_json_carries_every_line_with_its_arithmetic() -> None:
    code, out, err = run("--jobs-per-month", "1B", "--egress", "nat-per-az", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["profile"] == "standard" and doc["jobs_per_month"] == 1e9 and doc["egress"] == "nat-per-az"
    lines = {line["name"]: line for line in doc["sluice"]["lines"]}
    assert lines["NAT gateways (handler egress)"]["monthly"] == pytest.approx(98.55)
    assert lines["NAT data processed"]["monthly"] == pytest.approx(450.0)  # 10 KB × 10⁹ = 10,000 GB × 0.045
    assert lines["API Gateway (enqueue)"]["arithmetic"] == "333 M × $3.50 + 667 M × $2.80 (monthly tiers)"
    assert doc["ratio"] == pytest.approx(doc["sluice"]["monthly"] / doc["sqs_lambda"]["monthly"])
    assert doc["sqs_lambda"]["per_million"] == pytest.approx(6.1914468)


def test_an_idle_month_has_no_price_per_million() -> None:
    code, out, _ = run("--jobs-per-month", "0", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["sluice"]["per_million"] is None
    assert doc["sluice"]["monthly"] == pytest.approx(684.30156585)


@pytest.mark.parametrize(("args", "says"), [
    (["--jobs-per-month", "-5"], "between 0 and"),
    (["--jobs-per-month", "nan"], "not a number of jobs"),
    (["--jobs-per-month", "1e400"], "finite"),
    (["--jobs-per-month", "5000B"], "between 0 and"),
    (["--jobs-per-month", "1M", "--handler-seconds", "-1"], "between 0 and"),
    (["--jobs-per-month", "1M", "--handler-seconds", "NaN"], "finite"),
    (["--jobs-per-month", "1M", "--handler-seconds", "1e9"], "between 0 and 900"),
    (["--jobs-per-month", "1M", "--handler-seconds", "soon"], "not a number"),
    (["--jobs-per-month", "1M", "--egress-kb", "inf"], "finite"),
    (["--jobs-per-month", "1M", "--profile", "enormous"], "unknown profile 'enormous'"),
    (["--jobs-per-month", "1M", "--egress", "nat-everywhere"], "nat-everywhere"),
    ([], "--jobs-per-month"),
])
def test_hostile_inputs_are_usage_errors(args: list[str], says: str) -> None:
    code, out, err = run(*args)
    assert code == 2 and out == "" and says in err, (code, out, err)
    code, out, err = run(*args, "--json")
    error = json.loads(err)["error"]
    assert code == 2 and error["code"] == "USAGE" and says in error["message"]
