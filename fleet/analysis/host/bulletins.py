"""Software the provider must patch: the versions a node runs (the driver from its GPUs'
fingerprint, the container toolkit and fabric manager from agent/host/software.py)
against NVIDIA's security bulletins, kept as data in bulletins.json (each affected range
with its bulletin, CVE, date, the source it was read from and when), and against each
other: the fabric manager must match the driver's version on an NVSwitch node, or it
will not start and the GPUs cannot reach each other.

    found = judge_versions(NodeVersions("gpu-01", "550.90.07", "1.16.1", None))

A node under a bulletin is the provider's to patch. An update of what fleet knows is
an edit of bulletins.json alone (`load_bulletins` validates it: a wrong entry is refused
with its position and field).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from fleet.errors import InputError

Component = Literal["driver", "container_toolkit", "fabric_manager"]
VersionText = Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+)*$", max_length=32)]
WORDS = {"driver": "driver", "container_toolkit": "NVIDIA Container Toolkit",
         "fabric_manager": "fabric manager"}


class Range(BaseModel):
    """One affected range: every version up to and including one, or a driver branch
    below its first fixed version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    component: Component
    up_to_including: VersionText | None = None
    branch: Annotated[str, StringConstraints(pattern=r"^\d+$")] | None = None
    below: VersionText | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Range:
        if (self.up_to_including is None) == (self.below is None):
            raise ValueError("give up_to_including, or branch and below")
        if self.below is not None and self.branch is None:
            raise ValueError("a range `below` a version names its branch")
        return self

    def holds(self, version: str) -> bool:
        found = parse_version(version)
        if found is None:
            return False
        if self.up_to_including is not None:
            return found <= _must(self.up_to_including)
        if self.branch is not None and found[:1] != (int(self.branch),):
            return False
        return found < _must(self.below or "")

    def says(self) -> str:
        if self.up_to_including is not None:
            return f"{WORDS[self.component]} up to {self.up_to_including}"
        return f"{WORDS[self.component]} R{self.branch} below {self.below}"


class Bulletin(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bulletin: Annotated[str, StringConstraints(min_length=1, max_length=16)]
    title: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    cve: Annotated[str, StringConstraints(pattern=r"^CVE-\d{4}-\d{4,}$")]
    published: Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}$")]
    severity: Annotated[str, StringConstraints(max_length=64)]
    url: Annotated[str, StringConstraints(pattern=r"^https://", max_length=300)]
    source: Annotated[str, StringConstraints(min_length=1, max_length=1000)]
    read_at: Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}$")]
    affected: list[Range] = Field(min_length=1, max_length=32)
    note: Annotated[str, StringConstraints(max_length=300)] | None = None


class BulletinFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["fleet-bulletins/1"]
    about: str
    bulletins: list[Bulletin] = Field(max_length=10_000)


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """"550.127.05" -> (550, 127, 5); None where it is no dotted number."""
    if not text:
        return None
    parts = text.strip().split(".")
    if not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _must(text: str) -> tuple[int, ...]:
    found = parse_version(text)
    if found is None:
        raise ValueError(f"not a version: {text!r}")
    return found


def load_bulletins(text: str | None = None, origin: str = "bulletins.json") -> BulletinFile:
    """The bulletins fleet knows (the packaged file, or `text`), validated."""
    if text is None:
        text = resources.files("fleet.analysis.host").joinpath("bulletins.json").read_text("utf-8")
    try:
        return BulletinFile.model_validate(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{origin}: not a fleet-bulletins/1 file: {str(exc)[:600]}; "
                         "fix the entry named") from None


@dataclass(frozen=True)
class NodeVersions:
    """What one node runs, where read (None: not read)."""

    host: str
    driver: str | None
    container_toolkit: str | None
    fabric_manager: str | None
    nvswitch: bool = False  # an NVSwitch board (HGX), where the fabric manager runs


@dataclass(frozen=True)
class VersionFinding:
    host: str
    rule: Literal["bulletin", "fabric-manager"]
    title: str
    evidence: str
    action: str
    source: str
    bulletin: Bulletin | None = None


def judge_versions(node: NodeVersions, known: BulletinFile | None = None
                   ) -> list[VersionFinding]:
    """Each bulletin the node's versions fall under, and a fabric manager that does not
    match its driver."""
    known = known or load_bulletins()
    found = []
    for component in ("driver", "container_toolkit", "fabric_manager"):
        version = getattr(node, component)
        under = [(b, span) for b in known.bulletins for span in b.affected
                 if span.component == component and version is not None
                 and span.holds(version)]
        if not under:
            continue
        named = ", ".join(f"{b.bulletin} ({b.cve})" for b, _ in under)
        found.append(VersionFinding(
            node.host, "bulletin",
            f"{node.host}: {WORDS[component]} {version} under "
            f"{'NVIDIA bulletin' if len(under) == 1 else f'{len(under)} NVIDIA bulletins'} "
            f"{named}",
            "; ".join(f"{span.says()} affected ({b.cve}, {b.severity}, published "
                      f"{b.published}{'; ' + b.note if b.note else ''})" for b, span in under),
            f"ask the provider to patch the {WORDS[component]}",
            "; ".join(f"{b.title}, {b.url} (read {b.read_at} from {b.source[:160]})"
                      for b, _ in under), under[0][0]))
    driver, manager = node.driver, node.fabric_manager
    if manager is not None and driver is not None and manager != driver:
        found.append(VersionFinding(
            node.host, "fabric-manager",
            f"{node.host}: fabric manager {manager}, driver {driver}",
            "the fabric manager must be the driver's own version; on an NVSwitch board "
            "a mismatch keeps it from starting and the GPUs from reaching each other",
            "ask the provider to install the fabric manager of the driver's version",
            "NVIDIA Fabric Manager user guide: the fabric manager and driver versions "
            "must match"))
    return found
