"""The host's limits, its versions and its storage folders as metrics (issue 58), parsed
back by the Prometheus client's OpenMetrics parser: in base units, a host's path escaped,
an unlimited memlock absent rather than infinite, and the open findings counted by kind."""

from __future__ import annotations

import json
from pathlib import Path

import fleet
from fleet.metrics import metrics_text
from tests.metrics.test_metrics import one, parsed
from tests.store import host_storage_factory as make


def test_limits_versions_and_storage_come_out_in_base_units(store_url: str,
                                                           tmp_path: Path) -> None:
    hostile = '/mnt/"data"\\x'
    data = make.document("node-a", "bare-metal", make.limits("hgx-bare-metal",
                                                             toolkit="1.16.1"),
                         make.storage(make.target("/scratch", read=6.5, write=3.1),
                                      make.target(hostile, role="shared", fs_type="nfs4",
                                                  read=1.2, write=0.8)))
    path = tmp_path / "node.json"
    path.write_text(json.dumps(data))
    with fleet.Store(store_url) as store:
        assert store.ingest([path], provider="lent", host="node-a")["stored"] == 1
        samples = parsed(metrics_text(store))
    where = {"provider": "lent", "host": "node-a"}
    assert one(samples, "fleet_host_limit", **where, limit="cpus_available") == 4
    assert one(samples, "fleet_host_limit", **where, limit="shm_bytes") == 1081896960000
    assert one(samples, "fleet_host_limit", **where, limit="import_torch_seconds") == 4.2
    assert not [s for s in samples["fleet_host_limit"] if s[0]["limit"] == "memlock_bytes"]
    assert one(samples, "fleet_host_software_info", **where, container_toolkit="1.16.1",
               governor="mixed") == 1
    assert one(samples, "fleet_storage_bytes_per_second", **where, path="/scratch",
               figure="read") == 6.5e9
    assert one(samples, "fleet_storage_bytes_per_second", **where, path=hostile,
               figure="checkpoint_read") == 3.9e9
    assert one(samples, "fleet_storage_small_files_per_second", **where,
               path="/scratch") == 90000
    assert one(samples, "fleet_open_findings", kind="bulletin", side="provider",
               provider="lent") == 1
