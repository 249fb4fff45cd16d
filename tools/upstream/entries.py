"""UPGRADING.md's entries: parsing them (`Entry`, `parse_entries`) and what makes them wrong without
fetching anything (`entry_problems`: a missing field, a pin that moved, an automatic entry without its check)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tools.upstream import ROOT
from tools.upstream.registry import CHECKS

UPGRADING = ROOT / "UPGRADING.md"
AUTOMATIC = "`make check-upstream`"


@dataclass
class Entry:
    id: str
    title: str
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def pins(self) -> list[tuple[str, str]]:
        """(text, file) pairs of the entry's `Pinned` line: `text` in `file`."""
        return re.findall(r"`([^`]+)` in `([^`]+)`", self.fields.get("Pinned", ""))

    @property
    def automatic(self) -> bool:
        return self.fields.get("Re-check", "").startswith(AUTOMATIC)


FIELDS = ("Ours", "Upstream", "Pinned", "Re-check")


def parse_entries(text: str) -> list[Entry]:
    """Entries are `### `id`: title` headings followed by `- **Field**: text` items (continued on
    indented lines)."""
    entries: list[Entry] = []
    current_field = None
    for line in text.splitlines():
        if heading := re.match(r"^### `([a-z0-9-]+)`: (.+)$", line):
            entries.append(Entry(heading.group(1), heading.group(2)))
            current_field = None
        elif line.startswith("#"):
            current_field = None
            if entries and line.startswith("## "):
                entries.append(Entry("", ""))  # a section ends the entry before it
        elif entries and entries[-1].id and (item := re.match(r"^- \*\*([A-Za-z-]+)\*\*: (.*)$", line)):
            current_field = item.group(1)
            entries[-1].fields[current_field] = item.group(2)
        elif entries and entries[-1].id and current_field and line.startswith("  ") and line.strip():
            entries[-1].fields[current_field] += " " + line.strip()
        else:
            current_field = None
    return [e for e in entries if e.id]


def entry_problems(entries: list[Entry], root: Path = ROOT) -> list[str]:
    """What makes UPGRADING.md wrong without fetching anything: a missing field, an id twice, a pin
    that is no longer in the file it names (the version moved: re-check the entry), an automatic
    entry without checks here, or checks here without an entry."""
    problems = []
    seen = set()
    for entry in entries:
        if entry.id in seen:
            problems.append(f"{entry.id}: listed twice")
        seen.add(entry.id)
        problems += [f"{entry.id}: no '{name}' line" for name in FIELDS if name not in entry.fields]
        if "Pinned" in entry.fields and not entry.pins:
            problems.append(f"{entry.id}: its Pinned line names no `text` in `file`")
        for text, file in entry.pins:
            path = root / file
            if not path.exists():
                problems.append(f"{entry.id}: pinned in {file}, which does not exist")
            elif text not in path.read_text():
                problems.append(
                    f"{entry.id}: `{text}` is no longer in {file}: the pin moved; re-check this entry "
                    f"against the new version and update UPGRADING.md"
                )
        for named in re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|json|yaml|go|txt))`", entry.fields.get("Ours", "")):
            if not (root / named).exists():
                problems.append(f"{entry.id}: names {named}, which does not exist")
        for named, name in re.findall(r"`([\w./-]+\.py)` `([\w.]+)`", entry.fields.get("Ours", "")):
            if (root / named).exists() and name.split(".")[-1] not in (root / named).read_text():
                problems.append(f"{entry.id}: names {name} in {named}, which has no such name")
        if entry.automatic and entry.id not in CHECKS:
            problems.append(f"{entry.id}: says {AUTOMATIC} but tools/upstream/registry.py's CHECKS has no check for it")
    problems += [f"{name}: checked here but not an entry of UPGRADING.md" for name in CHECKS if name not in seen]
    return problems
