"""Per-GPU medians: the report's numpy reduction gives pandas' medians to the bit."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fleet.analysis.dataset import _medians


def test_group_medians_equal_pandas_to_the_bit() -> None:
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 45, size=3000)
    values = rng.normal(700.0, 5.0, size=int(sizes.sum()))
    values[rng.random(len(values)) < 0.15] = np.nan  # telemetry some results lack
    values[:sizes[0]] = np.nan  # a GPU none of whose results has the figure
    group = np.repeat(np.arange(len(sizes)), sizes)
    # The groups in `order`, not in storage order, as the report meets them.
    order = rng.permutation(len(values))
    shuffled = np.empty_like(values)
    shuffled[order] = values
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    found = _medians({"v": shuffled}, order, starts, sizes)["v"]
    expected = pd.Series(values).groupby(group).median().to_numpy()
    assert np.isnan(found[0])
    assert found.tobytes() == expected.tobytes()
