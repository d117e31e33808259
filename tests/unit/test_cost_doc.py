"""docs/cost.md's tables are the model's (issue 33, item 3): the committed doc is what `make cost` writes.

A figure edited by hand in a generated region, a price changed without `make cost`, or a region's
markers lost each fail here, so the doc's arithmetic cannot drift from the prices again.
"""

from __future__ import annotations

import difflib
from dataclasses import replace

import pytest

from sluice.core.errors import ConfigError
from sluice_dev.cost import doc
from sluice_dev.cost.numbers import money
from sluice_dev.cost.prices import load
from sluice_dev.cost.profiles import STANDARD


def test_the_committed_doc_is_what_the_model_computes() -> None:
    committed = doc.DOC.read_text(encoding="utf-8")
    fresh = doc.rewrite(committed)
    if fresh != committed:
        lines = difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True),
                                     "docs/cost.md (committed)", "docs/cost.md (the model)")
        diff = "".join(list(lines)[:80])
        raise AssertionError(f"docs/cost.md disagrees with the cost model: run make cost, commit it\n{diff}")


def test_a_figure_edited_by_hand_is_found() -> None:
    committed = doc.DOC.read_text(encoding="utf-8")
    tampered = committed.replace("| **Total** | | **684.30** |", "| **Total** | | **726.53** |")
    assert tampered != committed
    assert doc.rewrite(tampered) == committed


def test_every_region_is_there_once_and_no_other() -> None:
    committed = doc.DOC.read_text(encoding="utf-8")
    names = [m["name"] for m in doc.REGION.finditer(committed)]
    assert sorted(names) == sorted(doc.REGIONS)
    lost = committed.replace("<!-- /cost:sqs -->", "")
    with pytest.raises(ConfigError, match="missing \\['sqs'\\]"):
        doc.rewrite(lost)
    stray = committed + "\n<!-- cost:bogus -->\n<!-- /cost:bogus -->\n"
    with pytest.raises(ConfigError, match="bogus"):
        doc.rewrite(stray)


def test_the_doc_states_the_corrected_figures() -> None:
    """The fixed cost the volume and SQS tables use is the fixed table's (684.30 since issue 33's endpoints;
    749.93 before; they used 726.53)."""
    text = doc.DOC.read_text(encoding="utf-8")
    # $8.09 before the worker's logs were counted, $8.07 before the gateway's went, $7.86 before the
    # Idempotency-Key's record was written once (issue 33)
    assert "Cost per million = $7.23 + $684.30 / (millions of jobs a month)" in text
    assert "726.53" not in text and "$130" not in text
    assert "| 100 M (38.1/s) | 6.84 | 7.23 | **14.08** | 6.66 | 2.11× |" in text


def test_the_readme_first_screen_states_the_models_figures() -> None:
    """The idle cost, the way out and its price, and the comparison with SQS, as the model computes them."""
    readme = (doc.ROOT / "README.md").read_text(encoding="utf-8")
    first = " ".join("\n".join(readme.splitlines()[:30]).split())
    idle = doc.at(0).sluice.fixed
    dev = doc.at(0, replace(STANDARD, azs=2, job_partitions=4, dead_letter_partitions=4)).sluice.fixed
    existing = doc.at(0, replace(STANDARD, kafka="existing")).sluice.fixed
    single = doc.at(0, egress="nat-single").sluice.fixed - idle
    per_az = doc.at(0, egress="nat-per-az").sluice.fixed - idle
    assert f"${idle:.0f} with the defaults, ${dev:.0f} for a 2-AZ dev stack" in first
    assert f"about ${existing:.0f} on a Kafka cluster you already run" in first
    assert "no internet egress on a default deploy** (`HandlerEgress=none`)" in first
    assert f"`HandlerEgress=nat-single` (one NAT gateway, ${single:.2f} a month)" in first
    assert f"`nat-per-az` (${per_az:.2f}), plus ${load().usd('nat_gb'):.3f} a GB" in first
    ratios = [doc.at(jobs).ratio for jobs in (1e6, 100e6, 1e9)]
    said = " ".join(readme.split())
    assert (f"about {ratios[0]:.0f}× at 1 M jobs a month, {ratios[1]:.1f}× at 100 M, {ratios[2]:.1f}× at 1 B"
            in said)


def test_deploy_md_states_the_models_figures() -> None:
    text = " ".join((doc.ROOT / "docs" / "deploy.md").read_text(encoding="utf-8").split())
    costs = text[text.index("## Costs"):]
    idle, base = doc.at(0).sluice, doc.at(1e6).sluice
    dev = doc.at(0, replace(STANDARD, azs=2, job_partitions=4, dead_letter_partitions=4)).sluice.fixed
    nat = [doc.at(0, egress=e).sluice.fixed - idle.fixed for e in ("nat-single", "nat-per-az")]
    assert f"**about ${idle.fixed:.0f} a month with the defaults, ${dev:.0f} with 2 AZs" in costs
    assert f"(${nat[0]:.2f} or ${nat[1]:.2f})" in costs
    assert f"Each million jobs then adds about ${base.variable:.2f}" in costs

    def per_million(*names: str) -> str:
        return money(sum(base.line(n).monthly for n in names))

    dynamodb = per_million("DynamoDB writes", "DynamoDB reads", "DynamoDB storage", "DynamoDB PITR")
    assert f"DynamoDB ${dynamodb}" in costs
    assert f"Kafka ${per_million('MSK data in', 'MSK data out', 'MSK storage')}" in costs
    egress = text[text.index("### Handler egress"):]
    two = replace(STANDARD, azs=2)
    two_azs = doc.at(0, two, egress="nat-per-az").sluice.fixed - doc.at(0, two).sluice.fixed
    assert f"| ${nat[0]:.2f} a month, + $0.045 a GB |" in egress
    assert f"| ${nat[1]:.2f} a month with 3 AZs (${two_azs:.2f} with 2), + $0.045 a GB |" \
        in egress


def test_the_targets_say_why_the_missed_ones_are_missed_with_the_models_figures() -> None:
    """The small profile's SQS + Lambda at 1,000 M jobs: 4,088.3468 / 1,000 = $4.09 per million, so 1.20×
    allows 0.2 × 4.0883 = $0.82 more. Its idle month (issue 33): two endpoints (2 × 2 AZs × $0.01 × 730 =
    $29.20), the two it no longer has $29.20 more, the team map function's bound $0.08; 145.22556585."""
    said = " ".join(doc.targets().split())
    assert "SQS + Lambda costs $4.09 per million, so 1.20× allows Sluice $0.82 more" in said
    assert "2 interface endpoints cost $29.20 a month (2 × 2 AZs × $0.01 × 730)" in said
    assert "needed two more endpoints ($29.20 a month)" in said
    assert "at most $0.08 a month" in said
    assert "**$145.23** a month idle without egress, under $150.00" in said
    assert "costs $148.88" in said
