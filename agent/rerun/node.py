"""The node suite's three reruns (agent/rerun/memory.py, links.py, allreduce.py), handed to
the suite (agent/node/suite.py `Reruns`): the suite says when a figure may be measured
again and watches the GPUs around it; this says whether anything can be taken out, and
measures."""

import os
from typing import Any, Dict, List, Optional, Sequence

from agent.node import floors
from agent.node.suite import LINK_KINDS, Config, Progress, Reruns, Settle
from agent.rerun import allreduce, links, memory
from agent.source import settings as run_settings


def _table(cfg: Config) -> Dict[str, Any]:
    return cfg.floors if cfg.floors is not None else floors.load()


def _variants(prints: Sequence[Dict[str, Any]]) -> Dict[int, str]:
    return {int(p["index"]): str((p.get("variant") or {}).get("label"))
            for p in prints if p.get("index") is not None}


def _movable(recorded: Sequence[Dict[str, Any]], kinds: Sequence[str]) -> bool:
    """Whether any setting the run had that can move these kinds could be taken out."""
    return any(run_settings.removable(s) for kind in kinds
               for s in run_settings.suspects(recorded, kind))


class NodeReruns(Reruns):
    """Each of the node suite's short figures again without the run's settings."""

    def memory(self, cfg: Config, copies: List[Dict[str, Any]],
               prints: Sequence[Dict[str, Any]], progress: Progress) -> Optional[Settle]:
        recorded = run_settings.collect(os.environ, limit=None)
        if not _movable(recorded, ("memory_copy",)):
            return None  # nothing could be taken out: no floor read, nothing measured again
        return lambda: memory.settle(copies, recorded, _table(cfg), _variants(prints),
                                     cfg.device, cfg.copy_bytes, cfg.repeats, progress)

    def links(self, cfg: Config, copies: List[Dict[str, Any]],
              prints: Sequence[Dict[str, Any]], progress: Progress) -> Optional[Settle]:
        recorded = run_settings.collect(os.environ, limit=None)
        if not _movable(recorded, LINK_KINDS):
            return None
        return lambda: links.settle(copies, recorded, _table(cfg), _variants(prints),
                                    cfg.device, cfg.repeats, progress)

    def allreduce(self, cfg: Config, reduced: List[Dict[str, Any]],
                  prints: Sequence[Dict[str, Any]], ranks: Sequence[Optional[int]],
                  backend: str, progress: Progress) -> Optional[Settle]:
        return lambda: allreduce.settle(
            reduced, run_settings.collect(os.environ, limit=None), _table(cfg),
            floors.variant_of(prints), ranks, backend, cfg.allreduce_sizes,
            cfg.allreduce_timeout_s, cfg.allreduce_warmup, cfg.allreduce_iterations,
            progress)
