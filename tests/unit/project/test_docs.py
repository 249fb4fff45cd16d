"""The documents hold together: every relative link resolves (file and heading), and the README stays
what a newcomer reads first (short, the set-up commands near the top)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", root / "UPGRADING.md", *sorted((root / "docs").glob("*.md"))]


def anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", FENCE.sub("", path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", path.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{path.name}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{path.name}: {target} (no such heading)")
    return broken


def test_every_relative_link_resolves():
    assert [d.name for d in documents() if not d.exists()] == []
    assert [b for d in documents() for b in broken_links(d)] == []


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Runbooks\n")
    doc = tmp_path / "README.md"
    doc.write_text("[ok](docs/a.md#runbooks) [gone](docs/b.md) [heading](docs/a.md#nope)\n```\n[code](x.md)\n```\n")
    assert broken_links(doc) == ["README.md: docs/b.md (no such file)", "README.md: docs/a.md#nope (no such heading)"]


def test_readme_is_short_with_the_set_up_commands_near_the_top():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 200
    head = "\n".join(lines[:60])
    assert re.search(r"^make test\b", head, re.M) and re.search(r"^make up STACK=dev\b", head, re.M)


def test_readme_costs_are_what_the_cost_model_computes():
    """The README's cost table is ray_llm_eks/domain/stack/cost.py's figures for each shipped stack (at desired size and
    with every pool at max), so a price or graph change that moves them fails here until it is updated."""
    from ray_llm_eks.domain.stack import cost
    from tests.conftest import settings_of

    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| ([\d.]+) \| ([\d.]+) \|$", (ROOT / "README.md").read_text(), re.M)
    assert {stack for stack, _, _ in rows} >= {"dev", "baseline", "prod"}
    for stack, desired, at_max in rows:
        settings = settings_of(stack=stack)
        computed = cost.cost_range(settings, settings.prices)
        assert (f"{computed['desired']:.2f}", f"{computed['max']:.2f}") == (desired, at_max), stack


def test_readme_names_the_single_gpu_baseline_at_what_the_cost_model_computes():
    """The cheapest way in: baseline on each single-GPU type the README names plans, at the price it gives."""
    from ray_llm_eks.domain.stack import cost
    from tests.conftest import settings_of

    rows = table_rows((ROOT / "README.md").read_text(), "### The cheapest way in")
    assert rows[0][0] == "`g6.xlarge`"  # the cheapest first
    for instance_type, _, usd in rows:
        pools = {"collocated": {"instanceType": instance_type.strip("`")}}
        settings = settings_of({"ray-llm-eks:gpuPools": pools}, stack="baseline")
        assert f"{cost.estimate(settings, settings.prices).usd_per_hour:.2f}" == usd, instance_type


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table under `heading`, as cells."""
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("|")]
    return rows[2:]


def unsourced_figures(text: str, heading: str) -> list[str]:
    """Rows of the table under `heading` (step | figure | source) that give a number without a source."""
    return [row[0] for row in table_rows(text, heading) if re.search(r"\d", row[1]) and not row[2]]


FIRST_UP = "### Where the first `up`'s tens of minutes go"


def test_operations_has_the_runbooks_and_every_first_up_figure_names_its_source():
    text = (ROOT / "docs" / "operations.md").read_text()
    runbooks = [
        "Roll back a serve config.",
        "Roll back to the previous image.",
        "Upgrade Kubernetes (EKS).",
        "A `destroy` that does not finish.",
    ]
    assert [r for r in runbooks if f"**{r}**" not in text] == []
    steps = [row[0] for row in table_rows(text, FIRST_UP)]
    assert len(steps) >= 6 and any("control plane" in s for s in steps) and any("engine" in s for s in steps)
    assert unsourced_figures(text, FIRST_UP) == []


def test_a_figure_without_a_source_is_found():
    table = "| step | figure | source |\n| --- | --- | --- |\n| pull | 12 min | |\n| x | not measured | |\n"
    assert unsourced_figures(f"{FIRST_UP}\n\n{table}", FIRST_UP) == ["pull"]
