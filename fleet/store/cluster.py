"""The steps between a cluster's nodes in the store (tables `cluster_step`,
`cluster_step_node` and `cluster_figure`, revision 0022): one cluster run written in one
transaction, and runs read back as the judgement takes them
(fleet/analysis/cluster/stored.py judges them: the store only keeps and reads).

    stored = record_cluster_run(engine, run_id, results, documents, settings)
    (run,) = read_cluster_runs(engine, cluster="a100-pod")  # its newest run

A run is the controller's: its `run_id` (a uuid) groups every step of one cluster run, so
that the newest run of a cluster can be read back whole. Each node of a step keeps its
agent document of the same probe, through which the judgement reads the node's network
fingerprint (fleet/store/network.py).

What a host sent is not trusted here either: identifiers longer than their columns are
refused, free text is cut, lists are bounded as the step event bounds them
(docs/cluster.md), and of the ranks' settings only NCCL_*, GLOO_* and
CUDA_VISIBLE_DEVICES are kept, a value that may be a secret withheld by the agent's own
rule (agent/source/settings.py's `withheld`) before anything is written.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select

from agent.source.settings import storable, withheld
from fleet.errors import ClusterError, StoreError
from fleet.model.step import (
    NicFigure,
    NodeNics,
    NodeTransport,
    PortCounters,
    StepFigure,
    StepResult,
)
from fleet.store.database import WRITES
from fleet.store.models import ClusterFigure, ClusterStep, ClusterStepNode
from fleet.store.query import in_chunks

KINDS = ("cluster", "pair", "suspect")
# The ranks' settings kept: what the step event reports (agent/cluster/step.py).
SETTING_PREFIXES = ("NCCL_", "GLOO_")
SETTING_NAMES = ("CUDA_VISIBLE_DEVICES",)
MAX_SETTINGS = 64
MAX_VALUE = 256
# As the step event bounds them (docs/cluster.md, "fleet-cluster/1").
MAX_ITEMS = {"paths": 32, "interfaces": 32, "set_by_environment": 16}
MAX_ITEM = 256
MAX_ERROR = 4096
# Identifiers are refused past their columns' width, never cut: a cut name names another.
_WIDTHS = {"run id": 64, "cluster": 128, "provider": 128, "step id": 128, "host": 255,
           "backend": 16}


def withheld_value(why: str) -> str:
    """What is stored in place of a value that may be a secret: the setting stays named
    (the judgement reads that the run set it), its value does not."""
    return f"(withheld: {why})"


def screen_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings that may be stored: NCCL_*, GLOO_* and CUDA_VISIBLE_DEVICES with a
    plain name, sorted, at most MAX_SETTINGS; a value that may be a secret (a name such
    as NCCL_..._TOKEN, a URL with a user, a token's run of characters, one longer than
    MAX_VALUE) is replaced by `withheld_value`."""
    kept: dict[str, str] = {}
    for name in sorted(settings):
        if len(kept) >= MAX_SETTINGS:
            break
        if not storable(name) or not (name.startswith(SETTING_PREFIXES)
                                      or name in SETTING_NAMES):
            continue
        value = str(settings[name])
        why = withheld(name, value)
        kept[name] = value if why is None else withheld_value(why)
    return kept


def _screen_line(line: str) -> str:
    """NCCL's "NAME=VALUE" line (what it read from its environment), its value withheld
    as a setting's would be."""
    name, sep, value = line.partition("=")
    if not sep:
        return line[:MAX_ITEM]
    why = withheld(name.strip(), value.strip())
    return (line if why is None else f"{name}={withheld_value(why)}")[:MAX_ITEM]


def _items(values: Sequence[str], field: str) -> list[str]:
    return [str(v)[:MAX_ITEM] for v in values[:MAX_ITEMS[field]]]


def _cut(value: str | None, width: int) -> str | None:
    return None if value is None else str(value)[:width]


def _named(what: str, value: str, where: str) -> str:
    if not value or len(value) > _WIDTHS[what]:
        raise ClusterError(f"{where}: the {what} {value[:80]!r} is "
                           + ("empty" if not value else f"longer than {_WIDTHS[what]} "
                              "characters")
                           + "; a cluster run is stored under the names it ran with")
    return value


@dataclass(frozen=True)
class ClusterRun:
    """One cluster run as stored: its steps in the order they were recorded, each host's
    agent document of the same probe (None where none was stored) and the settings its
    ranks ran under (a host whose settings were not recorded is not in `settings`, which
    the judgement reads as not recorded). `started_at`: its first step's start."""

    cluster: str
    run_id: str
    started_at: dt.datetime
    results: tuple[StepResult, ...]
    documents: dict[str, int | None]
    settings: dict[str, dict[str, str]]
    provider: str | None = None


def _checked(run_id: str, results: Sequence[StepResult]) -> str:
    """The run's one cluster, after refusing what cannot be stored as one run."""
    _named("run id", run_id, "the cluster run")
    clusters = sorted({r.cluster for r in results})
    if len(clusters) != 1:
        raise ClusterError(f"cluster run {run_id}: its steps are of {len(clusters)} "
                           f"clusters ({', '.join(clusters)}); store one cluster's run at "
                           "a time, each under its own run id")
    seen: set[str] = set()
    for step in results:
        where = f"cluster run {run_id}, step {step.step_id[:80]!r}"
        _named("cluster", step.cluster, where)
        _named("step id", step.step_id, where)
        _named("backend", step.backend, where)
        for host in step.hosts:
            _named("host", host, where)
        if step.step_id in seen:
            raise ClusterError(f"{where}: the step id is given twice; each step of a run "
                               "needs its own")
        seen.add(step.step_id)
        if step.kind not in KINDS:
            raise ClusterError(f"{where}: kind {step.kind!r} is none of {', '.join(KINDS)}")
        if not step.hosts or len(set(step.hosts)) != len(step.hosts):
            raise ClusterError(f"{where}: its hosts ({', '.join(step.hosts)}) must be "
                               "distinct nodes, at least one")
        strangers = [t.host for t in step.transports if t.host not in step.hosts]
        if strangers:
            raise ClusterError(f"{where}: a transport of {', '.join(strangers)}, which is "
                               "not a node of the step")
    return clusters[0]


def _step_row(run_id: str, position: int, step: StepResult, provider: str | None,
              started_at: dt.datetime, wall_s: float | None) -> dict[str, Any]:
    return {"run_id": run_id, "cluster": step.cluster, "provider": provider,
            "step_id": step.step_id, "position": position, "kind": step.kind,
            "round": step.round, "started_at": started_at, "wall_s": wall_s,
            "ranks_per_node": step.ranks_per_node, "backend": step.backend,
            "algo": _cut(step.algo, 32), "error": _cut(step.error, MAX_ERROR),
            "launcher": step.launcher}


def _nics_row(nics: NodeNics | None) -> dict[str, Any] | None:
    if nics is None:
        return None
    return {"role": nics.role, "skipped": nics.skipped,
            "tests": [[t.device, t.port, t.rate_gbps, t.gbps, t.gdr, t.error, t.peer]
                      for t in nics.tests]}


def _nics_read(host: str, row: dict[str, Any]) -> NodeNics:
    return NodeNics(host, str(row["role"]), row["skipped"], tuple(
        NicFigure(i, str(d), int(p), rate, gbps, bool(gdr), error, peer)
        for i, (d, p, rate, gbps, gdr, error, peer) in enumerate(row["tests"])))


def _node_rows(step_pk: int, step: StepResult, documents: Mapping[str, int | None],
               settings: Mapping[str, Mapping[str, str]]) -> list[dict[str, Any]]:
    transports = {t.host: t for t in step.transports}
    counted = {c.host: c for c in step.counters}
    tested = {n.host: n for n in step.nics}
    rows = []
    for rank, host in enumerate(step.hosts):
        t = transports.get(host)
        ran = settings.get(host)
        c = counted.get(host)
        rows.append({
            "cluster_step_id": step_pk, "node_rank": rank, "host": host,
            "document_id": documents.get(host), "reported": t is not None,
            "network": None if t is None else _cut(t.network, 64),
            "plugin": None if t is None else _cut(t.plugin, 128),
            "gdrdma": None if t is None else t.gdrdma,
            "nccl_version": None if t is None else _cut(t.version, 64),
            "paths": [] if t is None else _items(t.paths, "paths"),
            "interfaces": [] if t is None else _items(t.interfaces, "interfaces"),
            "set_by_environment": [] if t is None else [
                _screen_line(line) for line in t.set_by_environment[
                    :MAX_ITEMS["set_by_environment"]]],
            "settings": None if ran is None else screen_settings(ran),
            "counters": None if c is None else {
                "ports": c.ports, "rose": [list(r) for r in c.rose], "reset": list(c.reset)},
            "nics": _nics_row(tested.get(host))})
    return rows


def _figure_row(step_pk: int, figure: StepFigure) -> dict[str, Any]:
    return {"cluster_step_id": step_pk, "op": figure.op, "size_bytes": figure.size_bytes,
            "busbw_gbs": figure.busbw_gbs, "algbw_gbs": figure.algbw_gbs,
            "time_us": figure.time_us, "busbw_min_gbs": figure.busbw_min_gbs,
            "busbw_max_gbs": figure.busbw_max_gbs}


def record_cluster_run(engine: Engine, run_id: str, results: Sequence[StepResult],
                       documents: Mapping[str, int | None],
                       settings: Mapping[str, Mapping[str, str]],
                       started_at: Mapping[str, dt.datetime] | None = None,
                       wall_s: Mapping[str, float] | None = None,
                       provider: str | None = None) -> int:
    """Store one cluster run's steps in one transaction; the number of steps stored.

    run_id: the controller's id of the run (a uuid), not yet in the store.
    results: every step of the run, one cluster's, in the order they ran.
    documents: each host's agent document of the same probe (None, or left out: none).
    settings: each host's settings as its ranks ran under them (the step event's
        `settings`); a host left out was not recorded. Screened (`screen_settings`).
    started_at, wall_s: each step's, by step id; a step without a start is stamped now.
    provider: the cluster's provider, as the inventory names it.

    A failed step (error set) is stored with its error and no figures. Nothing is
    stored when anything fails: ClusterError for what cannot be one run (checked before
    writing), StoreError for a run id already stored, the database's own error else.
    """
    if not results:
        return 0
    _checked(run_id, results)
    if provider is not None:
        _named("provider", provider, f"cluster run {run_id}")
    now = dt.datetime.now(dt.UTC)
    starts, walls = started_at or {}, wall_s or {}
    s = ClusterStep
    with engine.connect().execution_options(**{WRITES: True}) as conn, conn.begin():
        if conn.execute(select(func.count()).where(s.run_id == run_id)).scalar_one():
            raise StoreError(f"cluster run {run_id} is stored already: a run is stored "
                             "once, whole; give a new run its own id")
        rows = [_step_row(run_id, i, r, provider, starts.get(r.step_id, now),
                          walls.get(r.step_id)) for i, r in enumerate(results)]
        ids = conn.execute(insert(s).returning(s.id, sort_by_parameter_order=True),
                           rows).scalars().all()
        nodes = [row for pk, r in zip(ids, results, strict=True)
                 for row in _node_rows(pk, r, documents, settings)]
        figures = [_figure_row(pk, f) for pk, r in zip(ids, results, strict=True)
                   if r.error is None for f in r.figures]
        conn.execute(insert(ClusterStepNode), nodes)
        if figures:
            conn.execute(insert(ClusterFigure), figures)
    return len(results)


# --- reading back ------------------------------------------------------------------------

def _slices(values: Sequence[str], size: int = 500) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


def _runs(conn: Connection, cluster: str | None, providers: Sequence[str],
          since: dt.datetime | None, until: dt.datetime | None, latest: bool
          ) -> list[tuple[str, str, dt.datetime, str | None]]:
    """(cluster, run id, first start, provider) of the runs asked for."""
    s = ClusterStep
    query = select(s.cluster, s.run_id, func.min(s.started_at), func.max(s.provider)
                   ).group_by(s.cluster, s.run_id)
    if cluster is not None:
        query = query.where(s.cluster == cluster)
    if providers:
        query = query.where(s.provider.in_(list(providers)))
    runs = []
    for name, run_id, started, provider in conn.execute(query).all():
        when = _utc(started)
        if (since is None or when >= since) and (until is None or when <= until):
            runs.append((str(name), str(run_id), when, provider))
    runs.sort(key=lambda r: (r[0], r[2], r[1]))
    if latest:
        newest: dict[str, tuple[str, str, dt.datetime, str | None]] = {}
        for run in runs:
            newest[run[0]] = run  # sorted oldest first: the last one stays
        return list(newest.values())
    # Each cluster's runs newest first.
    runs.sort(key=lambda r: (r[0], -r[2].timestamp(), r[1]))
    return runs


def _newest(runs: Sequence[tuple[str, str, dt.datetime, str | None]], count: int
            ) -> list[tuple[str, str, dt.datetime, str | None]]:
    """Each cluster's first `count` of `runs` (each cluster's newest first)."""
    seen: dict[str, int] = {}
    kept = []
    for run in runs:
        seen[run[0]] = seen.get(run[0], 0) + 1
        if seen[run[0]] <= count:
            kept.append(run)
    return kept


def _utc(value: Any) -> dt.datetime:
    # min() keeps the column's type, but a driver that hands back text is read anyway.
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if not isinstance(value, dt.datetime):
        raise StoreError(f"a cluster step's start reads back as {value!r}, not a time")
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def read_cluster_runs(engine: Engine, cluster: str | None = None, latest: bool = True, *,
                      providers: Sequence[str] = (), since: dt.datetime | None = None,
                      until: dt.datetime | None = None, newest: int | None = None
                      ) -> list[ClusterRun]:
    """The stored runs of `cluster` (every cluster's where None): with `latest`, each
    cluster's newest run only (by its first step's start), else every run (each
    cluster's `newest` where given), each cluster's newest first; clusters by name.
    `providers`, `since` and `until` keep the runs of those providers that started
    within those times (inclusive)."""
    s, n, f = ClusterStep, ClusterStepNode, ClusterFigure
    with engine.connect() as conn:
        runs = _runs(conn, cluster, providers, since, until, latest)
        if newest is not None:
            runs = _newest(runs, newest)
        steps: list[Any] = []
        for chunk in _slices([r[1] for r in runs]):
            steps.extend(conn.execute(select(s.__table__).where(s.run_id.in_(chunk))).all())
        pks = sorted(step.id for step in steps)
        nodes: dict[int, list[Any]] = {}
        figures: dict[int, list[Any]] = {}
        for part in in_chunks(pks):
            for node in conn.execute(select(n.__table__).where(n.cluster_step_id.in_(part))
                                     .order_by(n.cluster_step_id, n.node_rank)):
                nodes.setdefault(node.cluster_step_id, []).append(node)
            for figure in conn.execute(select(f.__table__).where(f.cluster_step_id.in_(part))
                                       .order_by(f.cluster_step_id, f.id)):
                figures.setdefault(figure.cluster_step_id, []).append(figure)
    by_run: dict[str, list[Any]] = {}
    for step in sorted(steps, key=lambda row: (row.run_id, row.position)):
        by_run.setdefault(step.run_id, []).append(step)
    found = []
    for name, run_id, started, provider in runs:
        results = []
        documents: dict[str, int | None] = {}
        settings: dict[str, dict[str, str]] = {}
        for step in by_run.get(run_id, []):
            mine = nodes.get(step.id, [])
            for node in mine:
                if documents.get(node.host) is None:
                    documents[node.host] = node.document_id
                if node.settings is not None and node.host not in settings:
                    settings[node.host] = {str(k): str(v) for k, v in node.settings.items()}
            results.append(StepResult(
                cluster=step.cluster, step_id=step.step_id, kind=step.kind,
                round=step.round, hosts=tuple(node.host for node in mine),
                ranks_per_node=step.ranks_per_node, backend=step.backend, algo=step.algo,
                figures=tuple(StepFigure(fig.op, int(fig.size_bytes), fig.busbw_gbs,
                                         fig.algbw_gbs, fig.time_us, fig.busbw_min_gbs,
                                         fig.busbw_max_gbs)
                              for fig in figures.get(step.id, [])),
                transports=tuple(NodeTransport(
                    node.host, node.network, node.plugin, node.gdrdma, tuple(node.paths),
                    tuple(node.interfaces), tuple(node.set_by_environment),
                    node.nccl_version)
                    for node in mine if node.reported),
                error=step.error, launcher=step.launcher or "ssh",
                counters=tuple(PortCounters(
                    node.host, int(node.counters["ports"]),
                    tuple((str(p), str(c), int(r)) for p, c, r in node.counters["rose"]),
                    tuple(str(x) for x in node.counters["reset"]))
                    for node in mine if node.counters is not None),
                nics=tuple(_nics_read(node.host, node.nics)
                           for node in mine if node.nics is not None)))
        found.append(ClusterRun(name, run_id, started, tuple(results), documents, settings,
                                provider))
    return found
