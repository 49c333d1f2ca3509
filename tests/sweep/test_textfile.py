"""`fleet sweep --textfile`: the night's metrics for node_exporter's textfile collector, in
the text format it reads, renamed into place; a name it would not read is refused before
the night is probed."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleet.model.document import parse_document
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.sweeps import create_run
from tests.conftest import FIXTURES
from tests.probe.conftest import Workspace
from tests.store.conftest import migrated_sqlite
from tests.sweep.conftest import engine_of

NODE = FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json"


def test_the_sweep_writes_its_metrics_for_the_textfile_collector(workspace: Workspace) -> None:
    """The lent H200 node's real document is stored into the night's run before the sweep
    resumes it (the loopback host has no GPU), as tests/sweep/test_health.py does."""
    inventory = workspace.inventory({"lambda/n1": workspace.ssh_host(workspace.servers[0])})
    engine = engine_of(migrated_sqlite(workspace.db))
    run_id = create_run(engine, RunInfo(kind="sweep", sweep="nightly",
                                        inventory=str(inventory)))
    document = parse_document(json.loads(NODE.read_text()), str(NODE))
    with Ingest(engine, RunInfo(kind="sweep", sweep="nightly", run_id=run_id)) as ingest:
        ingest.store(document, Origin("lambda", "n1"))
    engine.dispose()
    folder = workspace.root / "textfile"
    folder.mkdir()
    target = folder / "fleet.prom"
    target.write_text("# an older night\n")
    done = workspace.fleet("sweep", str(inventory), "--resume", "--fingerprint-only",
                           "--accept-new-host-keys", "--db", str(workspace.db), "--no-report",
                           "--textfile", str(target))
    assert done.returncode == 0, done.stderr
    assert [p.name for p in folder.iterdir()] == ["fleet.prom"]  # no partial left behind
    text = target.read_text()
    assert "# EOF" not in text  # node_exporter's parser reads the text format, not OpenMetrics
    families = {f.name: f for f in text_string_to_metric_families(text)}
    speeds = {s.labels["gpu"]: s.value for s in
              families["fleet_gpu_matmul_flops_per_second"].samples}
    assert sorted(speeds) == ["0", "1", "2", "3"]
    assert speeds["0"] == pytest.approx(663.159211e12, rel=1e-8)
    assert {s.labels["host"] for s in families["fleet_gpu_info"].samples} == {"n1"}
    assert families["fleet_open_findings"].samples  # tonight's report, zeros included


def test_a_textfile_node_exporter_would_not_read_is_refused_before_probing(
        workspace: Workspace) -> None:
    inventory = workspace.inventory({"lambda/n1": workspace.ssh_host(workspace.servers[0])})
    for path, said in ((workspace.root / "fleet.txt", "reads only *.prom files"),
                       (workspace.root / "missing" / "fleet.prom", "does not exist")):
        done = workspace.fleet("sweep", str(inventory), "--fingerprint-only",
                               "--accept-new-host-keys", "--db", str(workspace.db),
                               "--textfile", str(path))
        assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not workspace.db.exists()  # refused before a store was opened or a host probed
