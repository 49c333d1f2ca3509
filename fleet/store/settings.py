"""The settings each document's run measured under (run_setting, written by
fleet/store/ingest.py) and the all-reduce's rerun without them (node_result's `rerun_*`):
what settles whose a short figure is (fleet/analysis/node/whose.py).

    settings = read_settings(engine, documents=[12, 13])

One row per setting and source, SETTING_COLUMNS in that order; a document stored before
0018 has none (fleet/analysis/node/whose.py then reads the all-reduce's `nccl_settings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, select

from fleet.frames import columns, typed
from fleet.model.settings import Setting, SettingsRerun
from fleet.store.models import RunSetting
from fleet.store.query import in_chunks

if TYPE_CHECKING:
    import pandas as pd

SETTING_COLUMNS = columns(
    ("document_id", "int64", "the agent document whose run it is"),
    ("name", "string", 'the setting ("NCCL_ALGO")'),
    ("value", "string", "its value; missing where the agent withheld it"),
    ("withheld", "string", "why the value was not recorded (it may be a secret)"),
    ("source", "string", '"environment", "inventory" (the inventory\'s `env:`) or '
                         '"nccl.conf:PATH" (a file NCCL reads)'),
    ("family", "string", '"nccl", "cuda", "cublas", "cudnn", "torch", "nvshmem", "openmp"'),
    ("applies", "boolean", "false where a source NCCL reads first set the same name"),
)


def setting_row(setting: Setting) -> dict[str, Any]:
    """run_setting's columns of one setting, without the document's id."""
    return {"name": setting.name, "value": setting.value, "withheld": setting.withheld,
            "source": setting.source, "family": setting.family, "applies": setting.applies}


def rerun_columns(rerun: SettingsRerun | None) -> dict[str, Any]:
    """node_result's `rerun_*` columns of a figure's rerun (all None without one)."""
    if rerun is None:
        return {"rerun_gbs": None, "rerun_without": None, "rerun_kept": None,
                "rerun_floor_gbs": None, "rerun_transport": None}
    transports = sorted((rerun.transports or {}).items(), key=lambda t: (-t[1], t[0]))
    return {"rerun_gbs": rerun.gbs, "rerun_without": " ".join(rerun.without)[:1024],
            "rerun_kept": " ".join(rerun.kept)[:1024] or None,
            "rerun_floor_gbs": rerun.floor_gbs,
            "rerun_transport": ", ".join(n for n, _ in transports)[:64] or None}


def read_settings(engine_or_conn: Engine | Connection, *,
                  documents: Sequence[int] | None = None) -> pd.DataFrame:
    """The settings of `documents` (every document's where None), SETTING_COLUMNS, by
    document and then as the agent listed them (the order NCCL applies them)."""
    import pandas as pd

    s = RunSetting
    stmt = select(*(getattr(s, c.name) for c in SETTING_COLUMNS)).order_by(
        s.document_id, s.id)
    wanted = [stmt] if documents is None else [
        stmt.where(s.document_id.in_(chunk)) for chunk in in_chunks(sorted(set(documents)))]
    fetched: list[Any] = []
    if isinstance(engine_or_conn, Engine):
        with engine_or_conn.connect() as conn:
            for query in wanted:
                fetched += conn.execute(query).all()
    else:
        for query in wanted:
            fetched += engine_or_conn.execute(query).all()
    names = [c.name for c in SETTING_COLUMNS]
    raw = pd.DataFrame([tuple(r) for r in fetched], columns=names, dtype=object)
    return typed(SETTING_COLUMNS, raw)


def job_suspects(engine_or_conn: Engine | Connection, documents: set[int]
                 ) -> dict[int, str]:
    """Per document, its run's settings that can move a job figure, "NAME=VALUE (source)"
    joined by "; " (agent/source/settings.py `suspects`); documents without any absent."""
    from agent.source import settings as families

    if not documents:
        return {}
    found: dict[int, list[str]] = {}
    rows = read_settings(engine_or_conn, documents=sorted(documents))
    for document, name, value, source, applies in zip(
            rows["document_id"].tolist(), rows["name"].tolist(),
            rows["value"].astype(object).tolist(), rows["source"].tolist(),
            rows["applies"].astype(object).tolist(), strict=True):
        if applies is False or not families.moves(str(name), "job") or families.kept(str(name)):
            continue
        shown = value if isinstance(value, str) else "(withheld)"
        found.setdefault(int(document), []).append(f"{name}={shown} ({source})")
    return {d: "; ".join(s)[:2048] for d, s in found.items()}
