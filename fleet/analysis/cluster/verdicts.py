"""What the judgement of a cluster's steps between nodes gives (fleet/analysis/
cluster.py): a verdict per pair, per node, and the findings with whose they are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fleet.analysis.node.whose import Party

Severity = Literal["fault", "info"]
Rule = Literal["pair-short", "pair-above-fabric", "pair-no-fabric", "pair-unjudged",
               "socket-fallback", "slow-node", "suspect", "shared-fault", "step-failed",
               "node-steps-failed", "every-step-failed", "cluster-figure", "cluster-short",
               "pair-regressed", "node-lost", "link-flap", "port-errors",
               "cluster-below-rate", "nic-short", "nic-untested"]


@dataclass(frozen=True)
class ClusterFinding:
    """One finding on a cluster's steps between nodes.

    whose: "provider", "renter" or "unsettled" for a fault (fleet/analysis/node/whose.py's
    parties); None for information.
    hosts: the nodes it is about (a pair's two, the slow node alone).
    steps: the step ids it rests on.
    """

    cluster: str
    rule: Rule
    severity: Severity
    whose: Party | None
    hosts: tuple[str, ...]
    title: str
    evidence: str
    action: str
    source: str
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class PairVerdict:
    """One pair step against what its fabric should give.

    op, busbw_gbs: the collective the verdict rests on (the one with the lower share) and
    its busbw at its largest size; None where the step gave no figure.
    expected_gbs: the lesser node's Active fabric ports x rate, in GB/s; None where there
    is nothing to judge by (no fabric, gloo, a rate unknown, no fingerprint).
    share: busbw_gbs / expected_gbs. passed: share >= 90%; None where not judged (no
    expectation, or a figure above the fabric); False for a step that failed.
    cause: why it is short, "; "-joined ("below rate on b; far NIC on b"), or "cause not
    shown by the fingerprint"; the error for a failed step; None for a pass.
    transport: NCCL's network on each node, "IB GDRDMA", "a: IB GDRDMA; b: Socket".
    whose: as a finding's, for a pair that did not pass; None otherwise.
    """

    step_id: str
    kind: str
    round: int | None
    hosts: tuple[str, ...]
    op: str | None
    busbw_gbs: float | None
    expected_gbs: float | None
    share: float | None
    passed: bool | None
    cause: str | None
    transport: str
    all_reduce_gbs: float | None = None
    all_gather_gbs: float | None = None
    whose: Party | None = None


@dataclass(frozen=True)
class NodeVerdict:
    """A node's pair steps: judged (pairs), passed, the ratio (None: none judged); slow:
    it failed most of its judged pairs beside partners known good; suspect: schedule.py's
    `sort_out` would test it again against a known-good node. failing: most of its pair
    steps failed (no figure) where its partners ran with others (fleet/analysis/
    pair_evidence.py); failed: its pair steps that failed; unjudged: those that ran and
    nothing could judge; lost: why it took part in no step (None: it did)."""

    host: str
    pairs: int
    passed: int
    ratio: float | None
    slow: bool
    suspect: bool
    failing: bool = False
    failed: int = 0
    unjudged: int = 0
    lost: str | None = None


@dataclass(frozen=True)
class ClusterJudgement:
    """The pair verdicts, the node verdicts and the findings, faults first."""

    cluster: str
    pairs: tuple[PairVerdict, ...]
    nodes: tuple[NodeVerdict, ...]
    findings: tuple[ClusterFinding, ...]
