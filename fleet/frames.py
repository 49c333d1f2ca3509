"""Frames as fleet hands them out: each column documented once (name, pandas dtype,
meaning) and cast to that dtype, whether the rows came as Python records (fleet/api.py)
or as the driver's tuples in bulk (fleet/store/node.py).

pandas is imported when the first frame is built: the CLI's commands import this module
and most of them never build a frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Column:
    """One documented column of a frame: its name, pandas dtype and meaning."""

    name: str
    dtype: str  # a pandas dtype's name
    description: str


UTC_TIME: Final = "datetime64[us, UTC]"


def columns(*rows: tuple[str, str, str]) -> tuple[Column, ...]:
    """Columns from (name, dtype, meaning); dtype "datetime" is a UTC time."""
    return tuple(Column(name, UTC_TIME if dtype == "datetime" else dtype, meaning)
                 for name, dtype, meaning in rows)


def frame(columns: Sequence[Column], rows: Iterable[Sequence[Any]]) -> pd.DataFrame:
    """A frame of `rows` (values in `columns`' order), each column cast to its dtype."""
    import pandas as pd

    records = list(rows)
    data: dict[str, Any] = {}
    for i, column in enumerate(columns):
        values = [record[i] for record in records]
        if column.dtype == UTC_TIME:
            # Microseconds, Python's own resolution, whether or not there are rows (pandas
            # would pick seconds for none).
            data[column.name] = pd.to_datetime(pd.Series(values, dtype=object), utc=True
                                               ).astype(UTC_TIME)
        elif column.dtype == "category":
            data[column.name] = pd.Categorical(values)
        elif column.dtype == "float64":
            data[column.name] = pd.Series([float("nan") if v is None else float(v)
                                           for v in values], dtype="float64")
        else:
            data[column.name] = pd.Series(values, dtype=object).astype(
                pd.api.types.pandas_dtype(column.dtype))
    return pd.DataFrame(data, columns=[c.name for c in columns])


def typed(columns: Sequence[Column], raw: pd.DataFrame) -> pd.DataFrame:
    """`raw` (the driver's values, a column per name) as `frame` would type it, a column
    at a time: for the many rows of a report, where `frame`'s per-value work would cost
    more than the query. Times may be the driver's datetimes or SQLite's text, booleans
    SQLite's 0 and 1."""
    import pandas as pd

    data: dict[str, Any] = {}
    for column in columns:
        values = raw[column.name]
        if column.dtype == UTC_TIME:
            # Each distinct time parsed once: a document's rows share theirs, and parsing
            # 100,000 of PostgreSQL's datetimes took 0.8 s.
            codes, distinct = pd.factorize(values.astype(object))
            times = pd.to_datetime(pd.Series(distinct, dtype=object), utc=True
                                   ).astype(UTC_TIME)
            data[column.name] = pd.Series(times.array.take(codes, allow_fill=True))
        elif column.dtype == "category":
            data[column.name] = values.astype(object).astype("category")
        elif column.dtype == "boolean":
            # SQLite's 0 and 1 are numbers, which pandas' boolean refuses from objects.
            data[column.name] = pd.array([None if pd.isna(v) else bool(v) for v in values],
                                         dtype="boolean")
        else:
            data[column.name] = values.astype(object).astype(
                pd.api.types.pandas_dtype(column.dtype))
    return pd.DataFrame(data, columns=[c.name for c in columns]).reset_index(drop=True)
