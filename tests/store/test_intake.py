"""`fleet ingest`'s pipeline with reader processes: the same outcome as reading in one
process, in the given order, and a clear error when a reader dies."""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from fleet.store.intake import PARALLEL_FROM, read_all
from tests.conftest import ROOT
from tests.store import factory
from tests.store.test_commands import fleet


def _files(directory: Path, count: int, bad: set[int]) -> list[str]:
    names = []
    for i in range(count):
        document = factory.document(host=f"gpu-{i:04d}", gpus=1, runs=5)
        if i in bad:
            document["benchmarks"][0]["stats"]["median_ms"] = -1.0
        path = directory / f"gpu-{i:04d}.json"
        path.write_text(json.dumps(document))
        names.append(str(path))
    return names


def test_readers_give_what_one_process_gives_in_the_same_order(tmp_path: Path) -> None:
    names = _files(tmp_path, PARALLEL_FROM + 37, bad={3, 150, PARALLEL_FROM + 30})
    names.insert(100, str(tmp_path / "missing.json"))
    here = list(read_all(names, jobs=1))
    readers = list(read_all(names, jobs=2))
    assert [item.name for item in readers] == names
    assert [item.rejected for item in readers] == [item.rejected for item in here]
    assert [item.prepared for item in readers] == [item.prepared for item in here]
    rejected = [item.name for item in readers if item.rejected]
    assert rejected == [names[3], names[100], names[151], names[PARALLEL_FROM + 31]]
    assert "missing.json: cannot read it" in str(readers[100].rejected)


def test_fleet_ingest_a_directory_with_readers(store_url: str, tmp_path: Path) -> None:
    documents = tmp_path / "collected"
    documents.mkdir()
    names = _files(documents, PARALLEL_FROM + 5, bad={42})
    (documents / "notes.txt").write_text("not a document\n")
    result = fleet("ingest", "--provider", "lambda", "--readers", "2", str(documents),
                   db=store_url)
    assert result.exit_code == 2, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[1].rstrip(":") for line in lines if line.startswith("stored")] == \
        [name for i, name in enumerate(names) if i != 42]
    assert lines[42].startswith(f"rejected        {names[42]}: invalid agent document")
    assert f"{PARALLEL_FROM + 4} stored, 1 rejected" in result.stderr
    rows = json.loads(fleet("results", "--json", "--limit", "0", db=store_url).stdout)
    assert len(rows) == PARALLEL_FROM + 4


def test_ingest_jobs_is_the_old_name_of_readers(store_url: str, tmp_path: Path) -> None:
    """`fleet results --jobs` is the job suite's figures; ingest's readers are --readers,
    and its old --jobs still works, hidden, with a note."""
    names = _files(tmp_path, 3, bad=set())
    old = fleet("ingest", "--jobs", "2", *names, db=store_url)
    assert old.exit_code == 0, old.output
    assert old.stderr.splitlines()[0] == (
        "Note: `fleet ingest --jobs` is deprecated; use --readers 2")
    assert old.stdout.count("stored          ") == 3
    both = fleet("ingest", "--jobs", "2", "--readers", "2", *names, db=store_url)
    assert both.exit_code == 2
    assert "--jobs is the old name of --readers: give --readers alone" in both.stderr
    assert fleet("ingest", "--jobs", "0", *names, db=store_url).exit_code == 2
    new = fleet("ingest", "--readers", "2", *names, db=store_url)
    assert new.exit_code == 0 and "deprecated" not in new.stderr
    assert new.stdout.count("already stored  ") == 3
    shown = fleet("ingest", "--help").stdout
    assert "--readers INTEGER RANGE" in shown and "--jobs" not in shown


def test_a_directory_without_documents_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    result = fleet("ingest", str(tmp_path), db=f"sqlite:///{tmp_path / 'fleet.db'}")
    assert result.exit_code == 2
    assert f"{tmp_path}: a directory without *.json or *.jsonl files" in result.stderr
    assert not (tmp_path / "fleet.db").exists()


READERS_KILLED = """
import json, multiprocessing, sys
from fleet.errors import FleetError
from fleet.store.intake import read_all
before = set(multiprocessing.active_children())
items = read_all(json.loads(sys.argv[1]), jobs=2)
next(items)
readers = set(multiprocessing.active_children()) - before
assert readers
for child in readers:
    child.kill()
try:
    for _ in items:
        pass
except FleetError as exc:
    print(exc)
"""


def test_a_reader_that_dies_is_a_clear_error_and_nothing_waits_for_it(tmp_path: Path) -> None:
    # In a process of its own, with a time limit: a reader killed while sending its chunk
    # left the pool's thread reading for ever, which hung the wait for the chunk or, once
    # that was fixed, the interpreter's exit (about one run in ten).
    names = _files(tmp_path, PARALLEL_FROM * 2, bad=set())
    done = subprocess.run([sys.executable, "-c", READERS_KILLED, json.dumps(names)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "a process reading the files stopped" in done.stdout


def test_ctrl_c_keeps_what_was_printed_and_stops_a_stuck_reader(tmp_path: Path) -> None:
    """A FIFO given as a file blocks its reader for good: Ctrl-C must still end the
    command at once, keep every document it printed as stored, and leave no reader."""
    names = _files(tmp_path, PARALLEL_FROM + 100, bad=set())
    fifo = tmp_path / "stuck.json"
    os.mkfifo(fifo)
    db = tmp_path / "fleet.db"
    command = [sys.executable, "-m", "fleet", "ingest", "--db", f"sqlite:///{db}",
               "--readers", "2", *names[:250], str(fifo), *names[250:]]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        printed = [process.stdout.readline() for _ in range(200)]  # two batches of 100
        time.sleep(0.5)  # the third batch waits for the FIFO's reader
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        # Opening the FIFO to write fails (ENXIO) unless a process still reads it; a
        # reader left behind is let go by that open, and with it the output pipe it holds.
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            reader_left = True
        except OSError as exc:
            assert exc.errno == errno.ENXIO, exc
            reader_left = False
        if process.poll() is None:  # a hang fails the test, and must not outlive it
            process.kill()
            process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert not reader_left, "a reader still had the FIFO open after the command ended"
    printed += out.splitlines(keepends=True)
    assert len(printed) == 200 and all(line.startswith("stored ") for line in printed)
    assert "Interrupted: 200 stored in" in err and "the same command again" in err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM document").fetchone() == (200,)
