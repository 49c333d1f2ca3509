"""After a plain (non-editable) install of the wheel into a new virtualenv, away from this
checkout, fleet carries every file its code reads beside the code: the Alembic migrations,
the report's templates, and the agent's own data (agent/node/floors.json, which the
reruns read from the zipapp `fleet probe` packs from the installed package: issue 54).
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest

from fleet.payload import PACKAGED_SUFFIXES
from fleet.store.schema import head_revision
from tests.install.conftest import Installed, tracked
from tests.store import factory

# One wheel and one venv for both modules (conftest.py's `installed`): on one xdist
# worker, or each worker would build its own.
pytestmark = pytest.mark.xdist_group("installed")

HEAD = head_revision()
# Where each folder of the checkout lands in the wheel: reports/ and migrations/ travel
# as fleet/report/templates and fleet/store/migrations (links in the checkout).
PLACES = {"agent/": "agent/", "fleet/": "fleet/", "reports/": "fleet/report/templates/",
          "migrations/": "fleet/store/migrations/"}
LINKS = ("fleet/report/templates", "fleet/store/migrations")


def left_out(files: Iterable[str], wheel: set[str]) -> list[str]:
    """The checkout's files under the packaged folders that the wheel does not carry."""
    missing = []
    for name in files:
        if name in LINKS or name.endswith("/__pycache__"):
            continue
        for folder, place in PLACES.items():
            if name.startswith(folder) and place + name[len(folder):] not in wheel:
                missing.append(name)
    return sorted(missing)


def test_every_file_beside_the_code_is_in_the_wheel(installed: Installed) -> None:
    files = tracked(others=False)
    assert "agent/node/floors.json" in files and "reports/report.html.j2" in files
    assert left_out(files, installed.names()) == []


def test_a_file_left_out_of_the_wheel_is_named() -> None:
    # The check must be able to fail: the wheel of issue 54 lacked the floors.
    wheel = {"agent/node/floors.py", "fleet/report/templates/report.css"}
    assert left_out(["agent/node/floors.py", "agent/node/floors.json",
                     "reports/report.css", "migrations/env.py"], wheel) == [
        "agent/node/floors.json", "migrations/env.py"]


def test_the_agent_the_installed_fleet_packs_reads_its_floors(installed: Installed,
                                                             tmp_path: Path) -> None:
    built = installed.run("agent", "build", "--out", str(tmp_path), cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    [payload] = tmp_path.glob("agent-*.pyz")
    with zipfile.ZipFile(payload) as archive:
        packed = set(archive.namelist())
    wanted = {name for name in tracked(others=False)
              if name.startswith("agent/") and name.endswith(PACKAGED_SUFFIXES)}
    assert wanted and wanted <= packed, sorted(wanted - packed)
    # Read as the agent reads them on a host: from the zipapp, by the host's Python.
    read = subprocess.run(
        [str(installed.python), "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "from agent.node import floors; table = floors.load(); "
         "print(table['format'], len(table['matmul']) > 0)", str(payload)],
        cwd=tmp_path, capture_output=True, text=True, check=False)
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["fleet-floors/1", "True"]


def test_a_wheel_install_migrates_ingests_and_reports(installed: Installed,
                                                     tmp_path: Path) -> None:
    document = tmp_path / "gpu-01.json"
    document.write_text(json.dumps(factory.document(host="gpu-01")))
    url = f"sqlite:///{tmp_path / 'fleet.db'}"

    def fleet(*args: str) -> subprocess.CompletedProcess[str]:
        return installed.run(*args, "--db", url, cwd=tmp_path)

    upgraded = fleet("db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"upgraded from empty to revision {HEAD}" in upgraded.stdout
    ingested = fleet("ingest", "--provider", "lambda", str(document))
    assert ingested.returncode == 0, ingested.stderr
    assert ingested.stdout.startswith(f"stored          {document}")
    rows = json.loads(fleet("results", "--json").stdout)
    assert [row["host"] for row in rows] == ["gpu-01", "gpu-01"]
    # The report's templates travel in the wheel too.
    for name in ("report.html", "report.md"):
        written = fleet("report", "-o", name)
        assert written.returncode == 0, written.stderr
        assert "lambda" in (tmp_path / name).read_text()

    where = subprocess.run([str(installed.python), "-c",
                            "from fleet.store.schema import MIGRATIONS; print(MIGRATIONS)"],
                           cwd=tmp_path, capture_output=True, text=True, env=installed.env,
                           check=True)
    assert str(installed.venv) in where.stdout, "the migrations must come from the wheel"
