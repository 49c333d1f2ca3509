"""Cards that computed wrong under load: the product checked bit for bit
(agent/matmul/integrity.py).

Two ways a card is caught. Its product changed under load: the same kernel on the same
seeded inputs gave other bits than its own first product, minutes into the soak. Or its
first product's digest differs from the other GPUs' of its node that share its device and
software stack (variant, dtype and shape, torch, CUDA runtime, cuBLAS): cuBLAS gives the
same bits on the same architecture and SM count from one version, so the odd one out
computed wrong. Either is a card to replace (Imbue's host validation and gpu-burn fail a
card on the same evidence). Where the node's GPUs split evenly, the digests say that one
side is wrong but not which: all are named, and the cause says so.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from sqlalchemy import Engine

from fleet.store.query import IntegrityRow, integrity_rows
from fleet.words import counted

CAUSE = "replace the card: it computed wrong under load"
UNDECIDED = "one of these cards computes wrong: replace the one a rerun beside a third names"


@dataclass(frozen=True)
class Corruption:
    """A GPU whose product changed under load, or whose digest stood apart on its node."""

    provider: str
    host: str
    variant: str
    gpu_indexes: tuple[int, ...]
    title: str
    evidence: str
    cause: str

    def finding(self) -> tuple[str, str, str, str, str, tuple[str, ...]]:
        """The report's finding: (kind, provider, title, evidence, cause, details)."""
        return ("corruption", self.provider, self.title, self.evidence, self.cause, ())


def _shape(row: IntegrityRow) -> str:
    dtype, m, n, k = row.config
    return f"{dtype} {m}x{n}x{k}"


def _changed(row: IntegrityRow, provider: str, host: str, node_all: bool) -> Corruption:
    _, m, n, _ = row.config
    when = (f"first at {row.first_s:.0f} s of load" if row.first_s is not None
            else "when is not known")
    heat = (f", at {row.temperature_c:.0f} °C" if row.temperature_c is not None
            else ", temperature not read")
    size = (f", {row.elements} of {m * n} elements differing" if row.elements is not None
            else "")
    evidence = (f"{row.mismatches} of {counted(row.checks, 'bit-for-bit check')} of the "
                f"{_shape(row)} product under load found it changed from the GPU's own first "
                f"product on the same inputs ({when}{heat}{size})")
    if node_all:
        evidence += ("; every checked GPU of the node changed: suspect a kernel that is not "
                     "bit-reproducible on this stack before the cards")
    if row.injected:
        evidence += "; constructed by the agent's test hook (FLEET_INTEGRITY_FLIP_AFTER)"
    title = f"{host} GPU {row.gpu_index} ({row.variant}): its product changed under load"
    return Corruption(provider, host, row.variant, (row.gpu_index,), title, evidence, CAUSE)


def _apart(rows: list[IntegrityRow], provider: str, host: str) -> list[Corruption]:
    """The GPUs whose first product's digest differs from the node's majority."""
    digests = Counter(r.digest for r in rows if r.digest is not None)
    if len(digests) < 2:
        return []
    ranked = digests.most_common()
    stack = rows[0].stack
    where = (f"{_shape(rows[0])} on torch {stack[0] or '?'}, CUDA {stack[1] or '?'}, "
             f"cuBLAS {stack[2] or '?'}")
    if ranked[0][1] > ranked[1][1]:
        common = ranked[0][0]
        found = []
        for row in rows:
            if row.digest is None or row.digest == common:
                continue
            evidence = (f"the digest of its first {where} product, {row.digest}, differs from "
                        f"the {counted(ranked[0][1], 'other GPU')} of its node with the same "
                        f"device and stack ({common}): the same kernel on the same inputs "
                        "gives the same bits on healthy cards")
            found.append(Corruption(
                provider, host, row.variant, (row.gpu_index,),
                f"{host} GPU {row.gpu_index} ({row.variant}): computed other bits than the "
                "rest of its node", evidence, CAUSE))
        return found
    named = sorted(r.gpu_index for r in rows if r.digest is not None)
    groups = "; ".join(f"{d}: GPU " + ", ".join(str(r.gpu_index) for r in rows
                                                if r.digest == d) for d, _ in ranked)
    return [Corruption(
        provider, host, rows[0].variant, tuple(named),
        f"{host} GPUs {', '.join(map(str, named))} ({rows[0].variant}): computed different "
        "bits from the same inputs",
        f"their first {where} products' digests split with no majority ({groups}): the "
        "same kernel on the same inputs gives the same bits on healthy cards", UNDECIDED)]


def find_corruption(engine: Engine, names: dict[int, tuple[str, str]]) -> list[Corruption]:
    """The corrupting GPUs of the documents `names` maps to (provider, host)."""
    if not names:
        return []
    nodes: dict[tuple[object, ...], list[IntegrityRow]] = defaultdict(list)
    for row in integrity_rows(engine, sorted(names)):
        nodes[(row.document_id, row.variant, row.config, row.stack)].append(row)
    found: list[Corruption] = []
    for rows in nodes.values():
        provider, host = names[rows[0].document_id]
        changed = [r for r in rows if r.mismatches > 0]
        node_all = len(rows) > 1 and len(changed) == len(rows)
        found += [_changed(r, provider, host, node_all) for r in changed]
        called = {r.gpu_index for r in changed}
        found += [c for c in _apart(rows, provider, host)
                  if not set(c.gpu_indexes) <= called or len(c.gpu_indexes) > 1]
    return found
