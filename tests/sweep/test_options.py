"""Sweep and worker options that cannot work together are refused before anything runs,
each naming the fix (in this process: the refusals come before any work)."""

from __future__ import annotations

import pytest

from tests.probe.conftest import Workspace

BROKER = "redis://127.0.0.1:6379/0"


@pytest.fixture
def inventory(workspace: Workspace) -> str:
    return str(workspace.inventory({"lambda/a": workspace.ssh_host(workspace.servers[0])}))


@pytest.mark.parametrize("kind", ["gap", "straggler", "drift"])
def test_no_report_with_a_report_kind_of_fail_on_is_refused(
        workspace: Workspace, inventory: str, kind: str) -> None:
    done = workspace.fleet_in_process("sweep", inventory, "--no-report", "--fail-on",
                                      f"change,{kind}", "--db", str(workspace.db))
    assert done.returncode == 2, done.stderr
    assert f"--fail-on {kind} is found by the night's report, which --no-report skips" \
        in done.stderr
    assert not workspace.db.exists()


def test_celery_needs_postgresql_for_the_sweep_and_the_worker(
        workspace: Workspace, inventory: str) -> None:
    sweep = workspace.fleet_in_process("sweep", inventory, "--via", "celery", "--broker",
                                       BROKER, "--db", str(workspace.db))
    assert sweep.returncode == 2, sweep.stderr
    assert "fleet sweep --via celery needs the shared PostgreSQL store" in sweep.stderr
    assert "give --db postgresql://USER@HOST:5432/NAME" in sweep.stderr
    worker = workspace.fleet_in_process("worker", inventory, "--queue", "lambda", "--broker",
                                        BROKER, "--db", str(workspace.db))
    assert worker.returncode == 2, worker.stderr
    assert "fleet worker needs the shared PostgreSQL store" in worker.stderr
    assert not workspace.db.exists()


def test_celery_refuses_controller_trust_and_a_short_visibility_timeout(
        workspace: Workspace, inventory: str, postgres_url: str) -> None:
    trust = workspace.fleet_in_process("sweep", inventory, "--via", "celery", "--broker",
                                       BROKER, "--db", postgres_url, "--accept-new-host-keys")
    assert trust.returncode == 2, trust.stderr
    assert "give `fleet worker --accept-new-host-keys` instead" in trust.stderr
    short = workspace.fleet_in_process("sweep", inventory, "--via", "celery", "--broker",
                                       BROKER, "--db", postgres_url, "--fingerprint-only",
                                       "--timeout", "60", "--visibility-timeout", "60")
    assert short.returncode == 2, short.stderr
    # 60 s of agent, 3 connect attempts of 10 s and 1 + 2 s of backoff between them.
    assert "--visibility-timeout 60 s is shorter than the longest host's probe (93 s" \
        in short.stderr
    assert "Give --visibility-timeout 153 or more" in short.stderr
