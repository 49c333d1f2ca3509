"""What every timed measurement shares, the matmul's, the node suite's and the job suite's:
the statistics of a series of runs (`stats.py`), when a card has soaked (`soak.py`), the
interval a repeat run may land in (`repeat.py`), NVML telemetry sampled beside the work
(`telemetry.py`), and who else was on the GPU meanwhile (`contention.py`).
"""
