"""Every Xid code fleet classifies, against NVIDIA's Xid catalog (agent/health/xid.py).

CATALOG is written out by hand from the catalog's table "Xids", column "Resolution Bucket
(Immediate Action)" (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), read
through leptonai/gpud's catalog_generated.go and NVIDIA/NVSentinel's xiderrorsmapping.csv
(which agree on every code here, but spell CONTACT_SUPPORT and XID_154 otherwise); the
action beside it is fleet's word for that bucket, with the workflow buckets' actions said
in agent/health/xid.py. Never recomputed from the table under test: a row changed in one
place and not the other fails here.
"""

from __future__ import annotations

import pytest

from agent.health import card as health
from agent.health import xid

# code: (bucket, action, cause)
CATALOG = {
    8: ("RESTART_APP", "none", "driver"),
    13: ("RESTART_APP", "none", "application"),
    31: ("RESTART_APP", "none", "application"),
    43: ("IGNORE", "none", "application"),
    45: ("WORKFLOW_XID_45", "none", "application"),
    46: ("RESET_GPU", "reset", "hardware"),
    48: ("WORKFLOW_XID_48", "reset", "hardware"),
    61: ("CONTACT_SUPPORT", "replace", "driver"),
    62: ("RESET_GPU", "reset", "driver"),
    63: ("IGNORE", "none", "hardware"),
    64: ("RESET_GPU", "reset", "hardware"),
    68: ("RESTART_APP", "none", "hardware"),
    69: ("RESTART_APP", "none", "application"),
    74: ("WORKFLOW_NVLINK_ERR", "reset", "hardware"),
    79: ("RESTART_BM", "drain_and_reset", "hardware"),
    92: ("IGNORE", "none", "hardware"),
    94: ("RESTART_APP", "none", "hardware"),
    95: ("RESET_GPU", "reset", "hardware"),
    109: ("RESET_GPU", "reset", "application"),
    119: ("RESET_GPU", "reset", "driver"),
    120: ("RESET_GPU", "reset", "driver"),
    121: ("IGNORE", "none", "hardware"),
    136: ("RESET_GPU", "reset", "hardware"),
    140: ("RESET_GPU", "reset", "hardware"),
    143: ("RESET_GPU", "reset", "hardware"),
    154: ("XID_154", "none", "driver"),
}
# The verdict of a hardware Xid stamped inside the run, by its action (card.py RULE).
VERDICTS = {"none": "degraded", "reset": "failing", "drain_and_reset": "failing",
            "replace": "failing"}


def line(code: int) -> str:
    return f"[  512.250001] NVRM: Xid (PCI:0000:52:00): {code}, pid=2211, name=python3, text"


def test_the_table_holds_the_catalogued_codes_and_no_others() -> None:
    assert sorted(xid.TABLE) == sorted(CATALOG)


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_each_code_carries_its_bucket_and_the_action_for_it(code: int) -> None:
    bucket, action, cause = CATALOG[code]
    assert xid.classify(line(code)) == {"code": code, "cause": cause, "action": action,
                                        "name": xid.TABLE[code].name, "bucket": bucket}


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_a_direct_bucket_asks_its_action_and_a_workflow_says_why_not(code: int) -> None:
    row = xid.TABLE[code]
    assert row.bucket is not None
    if row.bucket in xid.BUCKET_ACTIONS:
        assert row.action == xid.BUCKET_ACTIONS[row.bucket]
    else:
        # NVIDIA's workflows name no single action: the row's is card.py's for the same
        # event, and only these are workflows.
        assert row.bucket in ("WORKFLOW_XID_45", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR",
                              "XID_154")


def test_the_buckets_map_to_fleets_actions() -> None:
    assert xid.BUCKET_ACTIONS == {"IGNORE": "none", "RESTART_APP": "none",
                                  "RESET_GPU": "reset", "RESTART_BM": "drain_and_reset",
                                  "CONTACT_SUPPORT": "replace"}
    assert set(xid.BUCKET_ACTIONS.values()) <= set(health.ACTIONS)


@pytest.mark.parametrize("code", sorted(c for c, row in CATALOG.items() if row[2] == "hardware"))
def test_a_hardware_xid_inside_the_run_is_judged_by_its_bucket(code: int) -> None:
    _, action, _ = CATALOG[code]
    event = {**xid.classify(line(code)), "line": line(code)}
    verdict, asked, reasons = health.decide({"xid_during_run": [event], "ecc": None,
                                             "remapped_rows": None, "retired_pages": None})
    assert (verdict, asked) == (VERDICTS[action], action)
    assert reasons == [f"Xid {code} ({xid.TABLE[code].name}) during the agent's run"]


def test_a_code_not_in_the_table_is_unknown_and_never_judged() -> None:
    event = xid.classify(line(13000))
    assert event == {"code": 13000, "cause": "unknown", "action": "none",
                     "name": "not in fleet's table", "bucket": None}
    assert health.decide({"xid_during_run": [event], "ecc": None, "remapped_rows": None,
                          "retired_pages": None})[0] == "unknown"
