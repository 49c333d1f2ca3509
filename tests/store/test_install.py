"""After a plain (non-editable) `pip install .` into a new virtualenv, away from this
checkout, fleet still finds its migrations: it creates a database and stores a document.

Slow (a minute: a new virtualenv and the dependencies from the package index, or pip's
cache), because it is the only proof that the wheel carries migrations/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fleet.store.schema import head_revision
from tests.store import factory

HEAD = head_revision()

ROOT = Path(__file__).resolve().parents[2]


def _source_tree(target: Path) -> Path:
    """The files git would commit (no .venv, no build output), links kept as links."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, copy = ROOT / name, target / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, copy)
    return target


def test_a_wheel_install_migrates_and_ingests(tmp_path: Path) -> None:
    source = _source_tree(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "FLEET_DB", "VIRTUAL_ENV")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                              str(source)], capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stderr[-3000:]
    shutil.rmtree(source)  # nothing may come from the source tree any more

    work = tmp_path / "elsewhere"
    work.mkdir()
    document = work / "gpu-01.json"
    document.write_text(json.dumps(factory.document(host="gpu-01")))
    url = f"sqlite:///{work / 'fleet.db'}"

    def fleet(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "fleet"), *args, "--db", url], cwd=work,
                              capture_output=True, text=True, env=env)

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
        assert "lambda" in (work / name).read_text()

    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "from fleet.store.schema import MIGRATIONS; print(MIGRATIONS)"],
                           cwd=work, capture_output=True, text=True, env=env, check=True)
    assert str(venv) in where.stdout, "the migrations must come from the installed wheel"
