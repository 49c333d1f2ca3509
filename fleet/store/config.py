"""A benchmark configuration's columns, named once.

Results under different configurations are never compared (docs/design.md,
"Comparing providers honestly"), so the configuration is spelled in many places: the columns of
benchmark_result, the rows `fleet results` lists (`query.ResultRow`), the main query's
groups (`query.VariantSummary`) and the report's `fleet.analysis.dataset.Config`. Those
derive their lists of names from here; tests/store/test_config_fields.py checks that the
dataclasses carry exactly these fields.
"""

from __future__ import annotations

# The configuration's columns on benchmark_result, less the software stack, in the order
# `fleet results --csv/--json` lists them (ResultRow's and VariantSummary's field order).
CONFIG_COLUMNS = ("harness_version", "dtype", "m", "n", "k", "mode", "cache", "thermal",
                  "concurrency")

# The columns the software stack is read from (see query.software_stack).
STACK_COLUMNS = ("torch_version", "cuda_runtime_version", "cublas_version")

# The throttle reasons that mean the card was held at its power cap: a result's
# `power_cap_share` is the share of its telemetry samples under either.
POWER_CAP_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
