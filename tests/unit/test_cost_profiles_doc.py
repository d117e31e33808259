"""The profiles' figures in README.md and docs/deploy.md are the cost model's (issue 33, item 2)."""

from __future__ import annotations

from sluice_dev.cost import doc
from sluice_dev.cost.numbers import money
from sluice_dev.cost.profiles import PROFILES


def _flat(path: str) -> str:
    return " ".join((doc.ROOT / path).read_text(encoding="utf-8").split())


def test_the_readme_first_screen_states_the_small_profiles_idle_cost() -> None:
    readme = (doc.ROOT / "README.md").read_text(encoding="utf-8")
    first = " ".join("\n".join(readme.splitlines()[:30]).split())
    small = PROFILES["small"]
    idle, nat = doc.at(0, small).sluice.fixed, doc.at(0, small, egress="nat-single").sluice.fixed
    assert f"costs ${idle:.0f} idle, ${nat:.0f} with one NAT gateway as its way out" in first


def test_deploy_md_states_each_profiles_idle_cost() -> None:
    text = _flat("docs/deploy.md")
    profiles = text[text.index("### Profiles (issue 33)"):text.index("### Handler egress")]
    small, standard, large = (doc.at(0, PROFILES[n]).sluice.fixed for n in ("small", "standard", "large"))
    nat = doc.at(0, PROFILES["small"], egress="nat-single").sluice.fixed
    row = (f"| Idle, a month | **${money(small)}**; **${money(nat)}** with `HandlerEgress=nat-single` | "
           f"**${money(standard)}** | **${money(large)}** |")
    assert row in profiles
    for name in ("small", "standard", "large"):
        assert f"`{name}`" in profiles
    assert "First deploy (estimate)" in profiles
