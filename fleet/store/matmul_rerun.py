"""The soaked matmuls the agent measured again without the run's settings, then with
them (agent/rerun/matmul.py, migration 0020), as the report reads them to say whose a
short one is (fleet/analysis/node/whose.py `whose_matmul`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, select

from fleet.store.models import BenchmarkResult, Document
from fleet.store.query import in_chunks


@dataclass(frozen=True)
class StoredRerun:
    """One GPU's pair, as stored."""

    document_id: int
    gpu_index: int
    tflops: float  # soaked, the figure that was short
    rerun_tflops: float  # quick, without the settings
    with_tflops: float  # quick, with them, straight after
    without: tuple[str, ...]
    floor_tflops: float | None
    contended: bool

    @property
    def cost(self) -> float:
        """What the settings cost the quick figure: 1 - with / without."""
        return 1.0 - self.with_tflops / self.rerun_tflops


def read_matmul_reruns(engine_or_conn: Engine | Connection, documents: Sequence[int]
                       ) -> list[StoredRerun]:
    """Every stored pair of `documents`' results, newest document first."""
    b = BenchmarkResult
    stmt = (select(b.document_id, b.gpu_index, b.tflops, b.rerun_tflops, b.rerun_with_tflops,
                   b.rerun_without, b.rerun_floor_tflops, b.rerun_contended)
            .join(Document, Document.id == b.document_id)
            .where(b.rerun_tflops.is_not(None), b.rerun_with_tflops.is_not(None))
            .order_by(Document.collected_at.desc(), b.document_id.desc(), b.gpu_index))
    fetched: list[Any] = []
    chunks = [stmt.where(b.document_id.in_(c)) for c in in_chunks(sorted(set(documents)))]
    if isinstance(engine_or_conn, Engine):
        with engine_or_conn.connect() as conn:
            for query in chunks:
                fetched += conn.execute(query).all()
    else:
        for query in chunks:
            fetched += engine_or_conn.execute(query).all()
    return [StoredRerun(int(r[0]), int(r[1]), float(r[2]), float(r[3]), float(r[4]),
                        tuple(str(r[5] or "").split()),
                        None if r[6] is None else float(r[6]), bool(r[7]))
            for r in fetched]
