"""The bounds every rerun keeps: what the controller stores of one (fleet/model/settings.py
SettingsRerun) and how long its child may take."""

from typing import Dict

# Setting names taken out (or kept, or ran with) that a rerun names: the controller's cap.
MAX_NAMES = 64
# Characters of what a floor rests on.
MAX_BASIS = 512
# Characters of why a rerun failed.
MAX_WHY = 4000
# Seconds each rerun's child may run: a start (torch's import, CUDA's context, NVML's read
# of the GPUs: seconds) and its measurement. The matmul's two quick measurements of at
# most the harness's max_total_s; the job's short windows on each backend asked; a 1 GiB
# copy a repeat; a pair's copies and a GPU's host copies.
TIMEOUT_S: Dict[str, float] = {"matmul": 180.0, "job": 300.0, "memory": 120.0,
                               "links": 180.0}
