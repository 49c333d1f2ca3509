"""The benchmark configuration is named once (fleet.store.config.CONFIG_COLUMNS): the
dataclasses that carry it must carry exactly those fields, so that a field added in one
place and not the others fails here rather than in a report."""

from __future__ import annotations

from dataclasses import fields

from fleet.analysis.dataset import Config
from fleet.store.config import CONFIG_COLUMNS, STACK_COLUMNS
from fleet.store.models import BenchmarkResult
from fleet.store.query import ResultRow, VariantSummary


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _between(names: list[str], first: str, last: str) -> list[str]:
    return names[names.index(first) + 1:names.index(last)]


def test_constant_names_distinct_result_columns() -> None:
    assert len(set(CONFIG_COLUMNS)) == len(CONFIG_COLUMNS)
    columns = BenchmarkResult.__table__.columns.keys()
    assert set(CONFIG_COLUMNS) <= set(columns)
    assert set(STACK_COLUMNS) <= set(columns)


def test_result_row_carries_the_configuration_in_order() -> None:
    # ResultRow's order is the column order of `fleet results --csv/--json`.
    assert _between(_names(ResultRow), "variant", "tflops") == list(CONFIG_COLUMNS)
    assert _names(ResultRow).count("stack") == 1


def test_variant_summary_carries_the_configuration_in_order() -> None:
    assert _between(_names(VariantSummary), "variant", "stack") == list(CONFIG_COLUMNS)


def test_config_carries_the_configuration_and_stack() -> None:
    # Config's own field order is the order configurations sort in (order=True), which
    # reports rely on; it is not the listing's order, so only the set is compared here.
    names = _names(Config)
    assert names[-1] == "stack"
    assert len(names[:-1]) == len(CONFIG_COLUMNS)
    assert set(names[:-1]) == set(CONFIG_COLUMNS)
