from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
GPU_CASES = FIXTURES / "gpus"


@pytest.fixture
def h100_recording() -> Path:
    return GPU_CASES / "h100-sxm5-passthrough" / "nvml-recording.json"
