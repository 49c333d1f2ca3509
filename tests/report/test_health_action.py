"""The health finding asks for the agent's action (issue 36)."""

from __future__ import annotations

import pandas as pd

from fleet.analysis.health.cards import fleet_health
from fleet.report.rules import health as _health


def frame(action: object) -> pd.DataFrame:
    return pd.DataFrame({
        "provider": ["lambda"], "host": ["gpu-01"], "gpu_index": [3],
        "variant": ["H100 SXM5"], "health": ["degraded"],
        "health_reasons": [["a row remap is pending: it takes effect only when the GPU is "
                            "reset"]], "health_action": [action]})


def test_the_title_asks_for_the_action_and_the_cause_names_it() -> None:
    [finding] = _health(fleet_health(frame("reset")))
    assert finding.title == ("gpu-01 GPU 3 (H100 SXM5) is degraded: ask the provider to "
                             "reset it")
    assert finding.cause == "reset"
    [finding] = _health(fleet_health(frame("replace")))
    assert finding.title == ("gpu-01 GPU 3 (H100 SXM5) is degraded: ask the provider to "
                             "replace it")


def test_nothing_to_ask_or_an_older_row_keeps_the_verdict() -> None:
    for action in ("none", None):
        [finding] = _health(fleet_health(frame(action)))
        assert finding.title == "gpu-01 GPU 3 (H100 SXM5) is degraded"
        assert finding.cause is None
    [finding] = _health(fleet_health(frame("reset").drop(columns="health_action")))
    assert finding.title == "gpu-01 GPU 3 (H100 SXM5) is degraded"
