"""`fleet ingest`'s pipeline: files read, validated and turned into rows, in their order,
by reader processes when there are many, and stored here in batches.

Why processes: on one core, validating a one-GPU document and building its rows cost
about as much as storing it (bench/store_ingest.py), and the GIL keeps threads from
overlapping the two. A reader hands back `Prepared`, plain rows that unpickle in a
fraction of what validating took. This process stays the only writer: SQLite has one
writer at a time anyway, and on PostgreSQL one connection keeps the lock order of
fleet/store/ingest.py.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from fleet.errors import AgentError, FleetError, InputError
from fleet.store.ingest import Ingest, Origin, Prepared, Stored, prepare, read_document_file

# Documents stored per transaction into SQLite, and the longest a validated one waits for
# its batch, so that lines keep coming on a slow disk or a slow network mount.
BATCH_DOCUMENTS = 100
BATCH_S = 1.0
# Below this many files, starting reader processes (~0.3 s) costs more than they save.
PARALLEL_FROM = 200
# Files per task handed to a reader, and tasks queued per reader: enough to keep readers
# busy while this process writes, few enough that memory stays bounded when the writer is
# the slower side (an 8-GPU document's rows are ~70 KiB).
CHUNK = 25
AHEAD = 4
READER_NICENESS = 10
# How often a wait for a reader's chunk checks that the readers are alive (`_result`).
READER_POLL_S = 0.5
# A reader prepares a one-GPU document in about the time the writer stores one, so more
# readers than this only take memory (about 100 MiB each).
MAX_DEFAULT_JOBS = 4


@dataclass(eq=False)  # found in its batch by identity: a file may be given twice
class Item:
    """One file: validated and waiting for its batch, stored, or rejected."""

    name: str
    prepared: Prepared | None = None
    rejected: str | None = None
    stored: Stored | None = None

    @property
    def outcome(self) -> str:
        """"rejected", or how the document was stored."""
        if self.stored is None:
            return "rejected"
        return str(self.stored.outcome)


def read_item(name: str) -> Item:
    """Read, validate and prepare one file (`-`: standard input); never raises for the
    file's own faults, which become the item's `rejected` reason."""
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
        return Item(name, prepared=prepare(read_document_file(name, data), name))
    except (AgentError, InputError) as exc:
        return Item(name, rejected=str(exc))
    except OSError as exc:
        return Item(name, rejected=f"{name}: cannot read it ({exc.strerror})")


def _read_chunk(names: Sequence[str]) -> list[Item]:
    return [read_item(name) for name in names]


def _start_reader(writer: int) -> None:
    # Ctrl-C reaches the whole process group; the writer handles it and shuts the
    # readers down, which would otherwise each print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The writer is the part that cannot be spread: readers get what CPU it leaves, so
    # that a reader per core never starves it.
    os.nice(READER_NICENESS)
    threading.Thread(target=_follow, args=(writer,), daemon=True).start()


def _follow(writer: int) -> None:
    """End this reader when the writer is gone (killed with SIGKILL, say): an idle reader
    waits on a queue that other processes hold open, and would wait for ever."""
    while True:
        time.sleep(1.0)
        try:
            os.kill(writer, 0)
        except ProcessLookupError:
            os._exit(1)


def default_jobs() -> int:
    """One reader per core, up to MAX_DEFAULT_JOBS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1
    return min(cores, MAX_DEFAULT_JOBS)


def read_all(names: Sequence[str], jobs: int) -> Generator[Item, None, None]:
    """Every file read and prepared, in the given order; by `jobs` reader processes when
    there are at least PARALLEL_FROM files, else here."""
    if jobs <= 1 or len(names) < PARALLEL_FROM or "-" in names:  # stdin is this process's
        yield from (read_item(name) for name in names)
        return
    # forkserver, not fork: this process holds an open database connection, which a
    # forked child must never touch, and fork with threads is unsafe.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["fleet.store.intake"])
    chunks = [names[i:i + CHUNK] for i in range(0, len(names), CHUNK)]
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_reader,
                               initargs=(os.getpid(),))
    queued: deque[Future[list[Item]]] = deque()
    done = False
    try:
        for chunk in chunks:
            queued.append(pool.submit(_read_chunk, chunk))
            if len(queued) >= jobs * AHEAD:
                yield from _result(pool, queued.popleft())
        while queued:
            yield from _result(pool, queued.popleft())
        done = True
    except BrokenProcessPool:
        raise FleetError(
            "a process reading the files stopped (killed, or out of memory?); every file "
            "printed as stored is stored: run the same command again to store the rest "
            "(stored documents are skipped), with --readers 1 to read in one process") from None
    finally:
        if done:
            pool.shutdown()
        else:  # interrupted, or the database failed: do not wait for the readers
            _stop(pool)


def _readers(pool: ProcessPoolExecutor) -> list[multiprocessing.process.BaseProcess]:
    # ProcessPoolExecutor.kill_workers() comes with Python 3.14; until then its table,
    # which shutdown() empties.
    return list((getattr(pool, "_processes", None) or {}).values())


def _result(pool: ProcessPoolExecutor, future: Future[list[Item]]) -> list[Item]:
    """The chunk's items, or BrokenProcessPool once a reader has died. The pool sees a
    death by itself only between messages: a reader killed while sending its chunk leaves
    half a message in the pipe that all readers share, and the pool's thread waits for the
    rest for ever (one run in twelve of tests/store/test_intake.py, Python 3.11)."""
    while True:
        try:
            return future.result(timeout=READER_POLL_S)
        except TimeoutError:
            if any(process.exitcode is not None for process in _readers(pool)):
                raise BrokenProcessPool("a reader died") from None


def _stop(pool: ProcessPoolExecutor) -> None:
    """Kill the readers: one may be blocked for good (a FIFO given as a file, a hung
    network mount), and they ignore Ctrl-C."""
    processes = _readers(pool)
    # The pool's thread may be reading half a message that a killed reader left
    # (`_result`). With the readers dead, this process holds the pipe's last write end
    # (shutdown() forgets it, but the readers' Process objects keep it open), and closing
    # it ends that read, so the thread, which interpreter exit waits for, can finish.
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
    for process in processes:
        process.join(timeout=5)
    if writer is not None:
        writer.close()


def ingest_files(run: Ingest, names: Sequence[str], origin: Origin, *, batch: int, jobs: int,
                 on_item: Callable[[Item], None], counts: Counter[str] | None = None
                 ) -> Counter[str]:
    """Store every file's document, `batch` to a transaction, calling `on_item` for each
    file in the given order once its fate is committed; counts by outcome (into `counts`
    as they come, when given, so that an interrupted caller knows them). A database
    failure is raised after `on_item` has been called for every file stored before it."""
    counts = Counter() if counts is None else counts

    def done(item: Item) -> None:
        counts[item.outcome] += 1
        on_item(item)

    pending: list[Item] = []
    started = time.monotonic()
    # closing: on a database failure the readers stop now, not when the traceback goes.
    with closing(read_all(names, jobs)) as items:
        for item in items:
            if not pending:
                started = time.monotonic()
            pending.append(item)
            if len(pending) >= batch or time.monotonic() - started > BATCH_S:
                store_items(run, pending, origin, done)
                pending = []
        store_items(run, pending, origin, done)
    return counts


def store_items(run: Ingest, items: Sequence[Item], origin: Origin,
                done: Callable[[Item], None]) -> None:
    """Store a batch in one transaction, then report each item in the given order. A
    batch that fails is stored again one document at a time, so that the document at
    fault is named (and, if only its host name is bad, the others are still stored)."""
    valid = [(item, item.prepared) for item in items if item.prepared is not None]
    stored: list[Stored] | None = None
    if len(valid) > 1:
        try:
            stored = run.store_batch([(prepared, origin) for _, prepared in valid])
        except (InputError, DBAPIError):
            stored = None  # rolled back whole: one by one below
    if stored is not None:
        for (item, _), outcome in zip(valid, stored, strict=True):
            item.stored = outcome
    else:
        for item, prepared in valid:
            try:
                item.stored = run.store_prepared(prepared, origin)
            except InputError as exc:
                item.rejected = str(exc)
            except DBAPIError:
                # Say what was stored before the database failed, then fail as before.
                for earlier in items[:items.index(item)]:
                    done(earlier)
                raise
    for item in items:
        done(item)
