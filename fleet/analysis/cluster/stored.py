"""Stored cluster runs judged: a run read back from the store (fleet/store/cluster.py)
judged between its nodes, each node's network read from its agent document, and a run
against the same cluster's runs before it.

    (run,) = read_cluster_runs(engine, cluster="a100-pod")  # its newest run
    judgement = judge_run(engine, run)
    below = trends_of(engine, run).below

The store keeps and reads; judging is here, so that the store never imports the rules.
"""

from __future__ import annotations

from sqlalchemy import Engine

from fleet.analysis.cluster.judgement import ClusterJudgement, judge_cluster
from fleet.analysis.cluster.trend import RULE, TrendRule, Trends, pair_trends
from fleet.store.cluster import ClusterRun, read_cluster_runs
from fleet.store.network import read_networks


def judge_run(engine: Engine, run: ClusterRun) -> ClusterJudgement:
    """The judgement on `run` (fleet/analysis/cluster/judgement.py), each host's network read from
    its document; a host without a document, or whose document has no network, is not
    judged."""
    stored = {h: d for h, d in run.documents.items() if d is not None}
    networks = read_networks(engine, documents=sorted(set(stored.values())))
    return judge_cluster(run.results, {h: networks[d] for h, d in stored.items()
                                       if d in networks}, run.settings)


def trends_of(engine: Engine, run: ClusterRun, rule: TrendRule = RULE) -> Trends:
    """`run` against the same cluster's runs before it (fleet/analysis/cluster/trend.py):
    those of its provider, up to the rule's window."""
    runs = read_cluster_runs(engine, run.cluster, latest=False,
                             providers=(run.provider,) if run.provider else (),
                             until=run.started_at, newest=rule.window + 1)
    return pair_trends([run, *(r for r in runs if r.run_id != run.run_id)], rule)


def stored_trends(engine: Engine, cluster: str, run_id: str, provider: str | None,
                  rule: TrendRule = RULE) -> Trends:
    """The trends of run `run_id` just stored: its steps against the cluster's earlier
    runs; none where it is not the cluster's newest (another run stored meanwhile)."""
    runs = read_cluster_runs(engine, cluster, latest=False,
                             providers=(provider,) if provider else (), newest=1)
    if not runs or runs[0].run_id != run_id:
        return Trends()
    return trends_of(engine, runs[0], rule)
