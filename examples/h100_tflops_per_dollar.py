"""Which provider gives the most sustained TFLOP/s per dollar for H100 SXM, over the last
month?

    python examples/h100_tflops_per_dollar.py [STORE]    # default: the store `fleet` uses

Soaked, sustained results that passed the correctness check; each GPU counts once (its
median), each provider by the median of its GPUs, against the median price per GPU-hour
its hosts were listed at. Prices in different currencies are not converted: compare within one.
"""

import sys

import pandas as pd

import fleet

store = fleet.Store(sys.argv[1] if len(sys.argv) > 1 else None)
since = pd.Timestamp.now("UTC") - pd.Timedelta(days=30)
month = store.results(variant="H100 SXM5 80GB", since=since)
ok = month[(month.thermal == "soaked") & (month["mode"] == "sustained") & ~month.correctness_failed]
# dropna=False: a provider with no listed price stays in the table, its ratio missing.
gpus = ok.groupby(["provider", "currency", "host", "gpu_index"], observed=True, dropna=False).agg(
    tflops=("tflops", "median"), price=("price_per_gpu_hour", "median"))
offers = gpus.groupby(["provider", "currency"], observed=True, dropna=False).agg(
    tflops=("tflops", "median"), price=("price", "median"), gpus=("tflops", "size"))
offers["tflops_per_dollar"] = offers.tflops / offers.price
print(offers.sort_values("tflops_per_dollar", ascending=False).round(1).to_string())
