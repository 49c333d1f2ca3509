"""Whose a short job figure is (issue 44): a GPU's headline training step, or its
bandwidth-point decode, under the floor the agent judges its own figures by
(agent/rerun/job.py: the records' figure of its variant and backend less 5%, else a
share of its datasheet's peak or HBM bandwidth), read with what the agent did about it.

- **renter**: the agent ran the job again in the same run without the settings that can
  move it (CUDA_*, cuBLAS, cuDNN, PyTorch) and the rerun was no longer short: the
  settings cost the difference. Every job figure of that GPU in that run is left out of
  every comparison and cost, with the words that say what the settings cost.
- **unsettled**: short under such settings and not measured again without them (an
  older agent, a rerun that failed or ran beside another process): left out the same
  way, named with its suspects, so that no provider is ranked or priced on it.
- **provider**: no such setting in the run, or the rerun without all of them was still
  short: the figure stays, as the node's own.

One story per GPU and run (fleet/analysis/node/taint.py's rule): the verdict on its headline
takes every job figure of that GPU in that run with it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from agent.job import records as agent_records
from fleet.analysis.node.whose import HIDDEN, PLAIN

# (provider, host, run, GPU index)
GpuRun = tuple[str, str, int, int]


@dataclass(frozen=True)
class Verdict:
    """Whose a GPU-run's short job is, where not the provider's: what was measured, and
    why it is the renter's or unsettled (the finding's evidence and cause)."""

    party: str  # "renter" or "unsettled"
    measured: str  # "GPU 0 training step 62,937 tokens/s (MFU 0.38), under its floor of 75,898"
    why: str

    @property
    def words(self) -> str:
        return f"{self.measured}; {self.why}"


def _number(value: Any) -> float | None:
    if value is None or value is pd.NA:
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _what(row: dict[str, Any]) -> str:
    if row["workload"] == "train":
        return "training step"
    return f"decode ({row['point']} point)" if row.get("point") else "decode"


def _share_text(row: dict[str, Any], share: float | None) -> str:
    if share is None:
        return ""
    return f" (MFU {share:.2f})" if row["workload"] == "train" else f" ({share:.0%} of HBM)"


def _field(row: dict[str, Any]) -> str:
    return "mfu" if row["workload"] == "train" else "hbm_share"


def _short(row: dict[str, Any]) -> tuple[float, str] | None:
    """(floor tokens/s, basis) where the agent's rule calls the row short."""
    point = row.get("point")
    figure = {"headline": bool(row.get("headline")), "workload": str(row["workload"]),
              "point": point if isinstance(point, str) else None,
              "attention": str(row.get("attention")), "compiled": bool(row.get("compiled")),
              "suite_version": str(row.get("suite_version")),
              "tokens_per_s": _number(row.get("tokens_per_s")),
              "mfu": _number(row.get("mfu")), "hbm_share": _number(row.get("hbm_share"))}
    return agent_records.short(figure, variant=str(row.get("variant")))


def verdicts(frame: pd.DataFrame) -> dict[GpuRun, Verdict]:
    """Per GPU and run whose short headline is not the provider's, the verdict. A GPU-run
    with no short headline, or whose shortfall is the provider's, is absent."""
    if frame.empty or "rerun_tokens_per_s" not in frame:
        return {}
    found: dict[GpuRun, Verdict] = {}
    for record in frame.to_dict("records"):
        row = {str(k): v for k, v in record.items()}
        again = _number(row.get("rerun_tokens_per_s"))
        floor = _number(row.get("rerun_floor"))
        judged = (floor, "") if again is not None and floor is not None else _short(row)
        if judged is None:
            continue
        key: GpuRun = (str(row["provider"]), str(row["host"]), int(row["run_id"]),
                       int(row["gpu_index"]))
        first = (f"GPU {key[3]} {_what(row)} {row['tokens_per_s']:,.0f} tokens/s"
                 f"{_share_text(row, _number(row.get(_field(row))))}, under its floor of "
                 f"{judged[0]:,.0f}")
        suspects = row.get("job_suspects")
        suspects = suspects if isinstance(suspects, str) and suspects else None
        contended = bool(row.get("rerun_contended") is not None
                         and row.get("rerun_contended") is not pd.NA
                         and row.get("rerun_contended"))
        if again is not None and not contended:
            without = str(row.get("rerun_without") or "").split()
            if again >= judged[0]:
                cost = 1.0 - float(row["tokens_per_s"]) / again if again > 0 else 0.0
                it = "it" if len(without) == 1 else "them"
                why = (f"{suspects or ', '.join(without)}: {again:,.0f} tokens/s"
                       f"{_share_text(row, _number(row.get('rerun_share')))} without {it}, "
                       "measured again in the same run: "
                       f"{'a setting' if len(without) == 1 else 'settings'} of the run's "
                       f"environment costing {cost:.0%}; unset {it}")
                found[key] = Verdict("renter", first, why)
            continue  # still short without every suspect: the provider's
        if suspects is None:
            continue
        why = ("measured again beside another process, which settles nothing"
               if contended else "not measured again without them")
        found.setdefault(key, Verdict(
            "unsettled", first, f"measured under settings that can move it and {why}: "
            f"{suspects}; run the agent again (it re-measures a short job without them) or "
            "unset them, before comparing it"))
    return found


def masks(frame: pd.DataFrame) -> list[tuple[pd.Series, str]]:
    """Each GPU-run's rows with the words that leave them out, for the job's left-out
    reasons (fleet/analysis/job/figures.py)."""
    found = verdicts(frame)
    if not found:
        return []
    keys = list(zip(frame["provider"].astype(str), frame["host"].astype(str),
                    frame["run_id"].astype(int), frame["gpu_index"].astype(int),
                    strict=True))
    out = []
    for key, verdict in sorted(found.items()):
        mask = pd.Series([k == key for k in keys], index=frame.index, dtype=bool)
        prefix = "the renter's: " if verdict.party == "renter" else "unsettled: "
        out.append((mask, prefix + verdict.words))
    return out


_ITEM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*) \(([^()]*)\)$")


def anonymized_suspects(text: Any) -> Any:
    """`job_suspects` as an anonymized report names them: only plain values (a path or a
    host may name the renter's machines; fleet/analysis/node/whose.py `anonymized`)."""
    if not isinstance(text, str):
        return text
    out = []
    for item in text.split("; "):
        match = _ITEM.match(item)
        if match is None:
            out.append(HIDDEN)
            continue
        name, value, source = match.groups()
        shown = value if value == "(withheld)" or PLAIN.match(value) else HIDDEN
        out.append(f"{name}={shown} ({source})")
    return "; ".join(out)


def suspected(frame: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(provider, configuration key) -> the settings that can move a job its figures of
    that configuration ran under ("; "-joined, each once): a provider gap on the job whose
    slower side ran under such settings, never measured again without them, is not the
    provider's to answer (a run-wide setting slows every GPU alike, so no rule within a
    node sees it; only the comparison between providers does)."""
    if frame.empty or "job_suspects" not in frame:
        return {}
    found: dict[tuple[str, str], list[str]] = {}
    for provider, key, text in zip(frame["provider"].astype(str), frame["config"].astype(str),
                                   frame["job_suspects"].astype(object), strict=True):
        if not isinstance(text, str) or not text:
            continue
        items = found.setdefault((provider, key), [])
        items += [item for item in text.split("; ") if item not in items]
    return {k: "; ".join(v) for k, v in found.items()}
