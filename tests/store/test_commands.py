"""`fleet db`, `fleet ingest` and `fleet results` as a user runs them, on both backends."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fleet.cli import main
from fleet.store.database import open_engine, resolve
from fleet.store.schema import head_revision
from tests.store import factory
from tests.store.refuse import refusing

HEAD = head_revision()


def fleet(*args: str, db: str | None = None, stdin: str | None = None,
          env: dict[str, str] | None = None) -> Result:
    argv = [*args, "--db", db] if db is not None else list(args)
    return CliRunner().invoke(main, argv, input=stdin, env=env, catch_exceptions=False)


def _jsonl(document: dict[str, Any]) -> str:
    progress = {"event": "progress", "stage": "gpu", "message": "fingerprinting GPU 1 of 2"}
    return json.dumps(progress) + "\n" + json.dumps({"event": "document",
                                                     "document": document}) + "\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {"bare": tmp_path / "gpu-01.json", "events": tmp_path / "gpu-02.jsonl",
             "bad": tmp_path / "gpu-03.json", "junk": tmp_path / "notes.txt"}
    paths["bare"].write_text(json.dumps(factory.document(host="gpu-01")))
    paths["events"].write_text(_jsonl(factory.document(host="gpu-02", gpus=1)))
    bad = factory.document(host="gpu-03")
    bad["benchmarks"][0]["stats"]["median_ms"] = -1.0
    paths["bad"].write_text(json.dumps(bad))
    paths["junk"].write_text("not json at all\n")
    return paths


def test_ingest_stores_good_files_and_rejects_bad_ones(store_url: str,
                                                       files: dict[str, Path]) -> None:
    result = fleet("ingest", "--provider", "lambda", "--sweep", "nightly",
                   *(str(p) for p in files.values()), db=store_url)
    assert result.exit_code == 2
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"stored          {files['bare']}: document 1, 2 GPUs")
    assert lines[1].startswith(f"stored          {files['events']}: document 2, 1 GPU, "
                               "1 matmul result")
    assert lines[2].startswith(f"rejected        {files['bad']}: invalid agent document: "
                               "benchmarks.0.stats.median_ms")
    assert lines[3].startswith(f"rejected        {files['junk']}: agent output line 1 is "
                               "not JSON")
    assert "2 stored, 2 rejected" in result.stderr

    again = fleet("ingest", str(files["bare"]), str(files["events"]), db=store_url)
    assert again.exit_code == 0
    assert again.stdout.count("already stored") == 2

    rows = json.loads(fleet("results", "--json", db=store_url).stdout)
    assert len(rows) == 3
    assert {row["host"] for row in rows} == {"gpu-01", "gpu-02"}
    assert {(row["provider"], row["sweep"]) for row in rows} == {("lambda", "nightly")}


def test_ingest_from_standard_input(store_url: str) -> None:
    result = fleet("ingest", "--host", "from-inventory", "-", db=store_url,
                   stdin=_jsonl(factory.document(host="reported")))
    assert result.exit_code == 0, result.output
    rows = json.loads(fleet("results", "--json", db=store_url).stdout)
    assert {row["host"] for row in rows} == {"from-inventory"}


def test_results_filters_and_formats(store_url: str, tmp_path: Path) -> None:
    for provider, host, variant in (("lambda", "l1", "H100 SXM5 80GB"),
                                    ("coreweave", "c1", "H100 PCIe 80GB")):
        path = tmp_path / f"{host}.json"
        path.write_text(json.dumps(factory.document(host=host, variant=variant)))
        assert fleet("ingest", "--provider", provider, str(path), db=store_url).exit_code == 0

    listed = fleet("results", "--provider", "coreweave", "--csv", db=store_url).stdout
    rows = list(csv.DictReader(io.StringIO(listed)))
    assert {row["host"] for row in rows} == {"c1"} and len(rows) == 2
    assert rows[0]["flags"] == "power_capped"

    table = fleet("results", "--variant", "H100 SXM5 80GB", db=store_url,
                  env={"COLUMNS": "200"}).stdout
    assert "l1" in table and "c1" not in table and "power-cap" in table

    # A variant as listings spell it, in either command; one that is not stored is named.
    spelled = fleet("results", "--variant", "h100_pcie-80GB", "--csv", db=store_url).stdout
    assert {row["host"] for row in csv.DictReader(io.StringIO(spelled))} == {"c1"}
    report = fleet("report", "--variant", "H100-PCIe-80GB", "--format", "json", "-o", "-",
                   db=store_url)
    assert report.exit_code == 0, report.output
    assert json.loads(report.stdout[:report.stdout.rindex("}") + 1])["hosts"] == 1
    for command in ("results", "report"):
        missing = fleet(command, "--variant", "A100 80GB", db=store_url)
        assert missing.exit_code == 2
        assert ("--variant 'A100 80GB': no GPU of that variant is stored; the stored "
                "variants are H100 PCIe 80GB, H100 SXM5 80GB") in missing.stderr

    summary = json.loads(fleet("results", "--summary", "--json", db=store_url).stdout)
    assert {(s["provider"], s["variant"], s["gpus"]) for s in summary} == {
        ("lambda", "H100 SXM5 80GB", 2), ("coreweave", "H100 PCIe 80GB", 2)}

    none = fleet("results", "--since", "2030-01-01", db=store_url)
    assert none.exit_code == 0 and "No results match" in none.stderr
    limited = fleet("results", "--limit", "1", db=store_url, env={"COLUMNS": "200"})
    assert "Showing the newest 1 of 4 results" in limited.stderr


def test_results_show_the_soak_and_filter_by_stack(store_url: str, tmp_path: Path) -> None:
    documents = {
        "soaked": factory.document(host="s1", harness="1.3.0", gpu_drops=[0.01, 0.02],
                                   gpu_temperatures=[71.0, 76.0]),
        "quick": factory.document(host="q1", gpus=1, harness="1.3.0", thermal="cool-start",
                                  stack=factory.NEW_STACK),
    }
    for name, data in documents.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        assert fleet("ingest", "--provider", "lambda", str(path), db=store_url).exit_code == 0

    rows = {(row["host"], row["gpu_index"]): row
            for row in json.loads(fleet("results", "--json", db=store_url).stdout)}
    soaked = rows[("s1", 1)]
    assert soaked["thermal"] == "soaked" and soaked["temperature_load_c"] == 76.0
    assert soaked["soak_drop"] == pytest.approx(0.02) and soaked["soak_s"] == 120.0
    first = documents["soaked"]["benchmarks"][1]["soak"]["first_20s_tflops"]
    assert soaked["first_20s_tflops"] == pytest.approx(first)
    assert soaked["stack"] == "torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4"
    assert rows[("q1", 0)]["thermal"] == "cool-start"
    assert rows[("q1", 0)]["first_20s_tflops"] is None
    # The soaked result carries where a repeat lands. The factory's "H100 SXM5 80GB" is no
    # catalog label, so the widest measured spread stands in (the H100 SXM5's: sd 0.571%
    # over 9 dof): half-width 2.262 x sqrt(2) x 0.571% = 1.827%. A cool-start one has none.
    half = 2.262 * 2 ** 0.5 * 0.00571
    assert soaked["repeat_low_tflops"] == pytest.approx(soaked["tflops"] * (1 - half))
    assert soaked["repeat_high_tflops"] == pytest.approx(soaked["tflops"] * (1 + half))
    assert soaked["repeat_basis"] == "variant"
    assert rows[("q1", 0)]["repeat_low_tflops"] is None

    table = fleet("results", db=store_url, env={"COLUMNS": "100"}).stdout
    lines = table.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 100
    # Two benchmarks on two stacks: each gets a letter in the bench column, spelled out
    # with its stack under the table.
    words = " ".join(table.split())
    assert ("bench: A = bf16 8192³ cool-start, torch 2.13.0+cu130, CUDA 13.0, cuBLAS "
            "13.0.2; B = bf16 8192³, torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4") in words
    (s1,) = [line for line in lines if " s1 " in line and " 1 B " in line]
    # The first 20 s give way to the repeat interval in 80 columns: the drop says it.
    assert f"{soaked['tflops']:.1f}" in s1 and f"{first:.1f}" not in s1 and "2.0%" in s1
    assert " 76 " in s1 and " ±1.8% " in s1
    (q1,) = [line for line in lines if " q1 " in line]
    # A cool start has no repeat interval and no drop.
    assert " A " in q1 and "±" not in q1 and " - " in q1

    listed = fleet("results", "--stack", "CUBLAS 13.0", "--csv", db=store_url).stdout
    found = list(csv.DictReader(io.StringIO(listed)))
    assert [(row["host"], row["stack"]) for row in found] == [
        ("q1", "torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2")]
    assert {"thermal", "first_20s_tflops", "soak_drop", "temperature_load_c"} <= set(found[0])
    one = fleet("results", "--stack", "cuBLAS 12.8", db=store_url, env={"COLUMNS": "100"})
    words = " ".join(one.stdout.split())  # the title may wrap
    assert "; torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4" in words and "q1" not in words
    summary = json.loads(fleet("results", "--summary", "--json", db=store_url).stdout)
    assert {(s["thermal"], s["stack"], s["gpus"]) for s in summary} == {
        ("soaked", "torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4", 2),
        ("cool-start", "torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2", 1)}
    (hot,) = [s for s in summary if s["thermal"] == "soaked"]
    assert hot["drop"] == pytest.approx(0.015)
    assert "--stack" in fleet("results", "--help").stdout


def test_ingest_goes_on_past_a_batch_and_says_what_a_failing_database_kept(
        store_url: str, tmp_path: Path) -> None:
    """Documents are stored 100 to a transaction; when the database refuses one, the
    files before it are still stored (and said to be), nothing of it is, and the command
    fails naming the database."""
    paths = []
    for i in range(1, 131):
        path = tmp_path / f"gpu-{i:03d}.json"
        path.write_text(json.dumps(factory.document(host=f"gpu-{i:03d}", gpus=1, runs=5)))
        paths.append(str(path))
    engine = open_engine(resolve(store_url))
    try:
        with refusing(engine, "document", "NEW.hostname = 'gpu-120'"):
            result = fleet("ingest", *paths, db=store_url)
    finally:
        engine.dispose()
    assert result.exit_code == 4 and "refused by test" in result.stderr
    said = [line.split()[1].rstrip(":") for line in result.stdout.splitlines()]
    assert said == paths[:119]
    rows = json.loads(fleet("results", "--json", "--limit", "1000", db=store_url).stdout)
    assert sorted(row["host"] for row in rows) == [f"gpu-{i:03d}" for i in range(1, 120)]
    again = fleet("ingest", *paths[118:], db=store_url)
    assert again.exit_code == 0, again.output
    assert again.stdout.count("already stored") == 1 and again.stdout.count("stored ") == 12


def test_a_hosts_strings_are_not_rich_markup(store_url: str, tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(factory.document(host="[bold red]evil[/]")))
    assert fleet("ingest", str(path), db=store_url).exit_code == 0
    assert "[bold red]evil[/]" in fleet("results", db=store_url, env={"COLUMNS": "200"}).stdout


def test_a_variant_asked_of_an_empty_store_says_what_to_do(empty_url: str) -> None:
    # A store that is there but holds nothing (`fleet db upgrade` made it): a SQLite file
    # that is not there is refused before any filter is read.
    assert fleet("db", "upgrade", db=empty_url).exit_code == 0
    done = fleet("results", "--variant", "H100 SXM5 80GB", db=empty_url)
    assert done.exit_code == 2
    assert "--variant: nothing is stored yet; run `fleet probe INVENTORY` first" in done.stderr


def test_db_upgrade_and_current(empty_url: str) -> None:
    before = fleet("db", "current", db=empty_url)
    assert before.exit_code == 0 and "revision: none" in before.stdout
    upgraded = fleet("db", "upgrade", db=empty_url)
    assert upgraded.exit_code == 0 and f"upgraded from empty to revision {HEAD}" in upgraded.stdout
    assert f"already at revision {HEAD}" in fleet("db", "upgrade", db=empty_url).stdout
    assert f"revision: {HEAD} (newest)" in fleet("db", "current", db=empty_url).stdout
    # A stale store says before it starts that this may take minutes.
    from fleet.store.database import open_engine, resolve
    from fleet.store.schema import downgrade

    engine = open_engine(resolve(empty_url))
    try:
        downgrade(engine, "0008")
    finally:
        engine.dispose()
    stale = fleet("db", "upgrade", db=empty_url)
    assert stale.exit_code == 0, stale.output
    assert f"from revision 0008 to {HEAD}: on a store of millions of results" in stale.stderr
    assert f"upgraded from 0008 to revision {HEAD}" in stale.stdout
    assert "millions" not in fleet("db", "upgrade", db=empty_url).stderr


def test_fleet_db_environment_variable(store_url: str) -> None:
    shown = fleet("db", "current", env={"FLEET_DB": store_url})
    assert "(from FLEET_DB)" in shown.stdout


def test_a_password_is_never_printed(postgres_url: str) -> None:
    # The test server trusts local connections, so this password is sent and ignored.
    with_password = postgres_url.replace("postgresql://postgres@",
                                         "postgresql://postgres:s3cret@")
    for args in (("db", "current"), ("db", "upgrade"), ("results",)):
        result = fleet(*args, db=with_password)
        assert result.exit_code == 0, result.output
        assert "s3cret" not in result.output
    assert "postgres:***@" in fleet("db", "current", db=with_password).stdout
    unreachable = fleet("results", db="postgresql://postgres:s3cret@127.0.0.1:1/x")
    assert unreachable.exit_code == 4
    assert "s3cret" not in unreachable.output and "postgres:***@127.0.0.1:1" in unreachable.output


@pytest.mark.parametrize("command", [["db"], ["db", "upgrade"], ["db", "current"],
                                     ["ingest"], ["results"]])
def test_help_shows_an_example(command: list[str]) -> None:
    result = fleet(*command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout and "fleet " in result.stdout
