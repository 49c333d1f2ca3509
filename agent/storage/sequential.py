"""Sequential write and read of one file, one stream, with the page cache out of the way:
O_DIRECT where the filesystem takes it, as fio's `--direct=1 --ioengine=psync` does
(bench/storage_fio.py checks the two agree), the write's time including its fsync.

Where O_DIRECT is refused (tmpfs, many FUSE filesystems, some NFS mounts) the file is
written and read through the page cache and nothing is dropped (the agent clears no
cache on a host it rents): `direct` is False, and the read figure may be memory's.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import mmap
import os
import time
from typing import Any, Dict, Tuple

DIRECT = getattr(os, "O_DIRECT", 0)


def _buffer(block: int) -> mmap.mmap:
    # An anonymous map is page-aligned, as O_DIRECT needs; random bytes, so that a
    # compressing or deduplicating filesystem cannot shrink what it stores.
    buf = mmap.mmap(-1, block)
    seed = os.urandom(1 << 20)
    for start in range(0, block, len(seed)):
        buf[start:start + len(seed)] = seed[:block - start]
    return buf


def _open(path: str, flags: int, direct: bool) -> Tuple[int, bool]:
    """(the descriptor, whether O_DIRECT holds): O_DIRECT where asked and taken."""
    if direct and DIRECT:
        try:
            return os.open(path, flags | DIRECT, 0o600), True
        except OSError:
            pass
    return os.open(path, flags, 0o600), False


def _write(path: str, buf: mmap.mmap, size: int, seconds: float) -> Tuple[bool, int, float]:
    """(direct, bytes written, seconds with the fsync)."""
    create = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd, direct = _open(path, create, True)
    written = 0
    started = time.perf_counter()
    try:
        while written < size:
            try:
                written += os.write(fd, buf)
            except OSError:
                if not direct or written:
                    raise
                # the open took O_DIRECT but the first write did not (some FUSE)
                os.close(fd)
                fd, direct = _open(path, create, False)
                started = time.perf_counter()
                continue
            if time.perf_counter() - started > seconds:
                break
        os.fsync(fd)
        return direct, written, time.perf_counter() - started
    finally:
        os.close(fd)


def _read(path: str, buf: mmap.mmap, size: int, direct: bool,
          seconds: float) -> Tuple[int, float]:
    """(bytes read, seconds)."""
    fd, _ = _open(path, os.O_RDONLY, direct)
    view = memoryview(buf)
    read = 0
    started = time.perf_counter()
    try:
        while read < size:
            got = os.readv(fd, [view])
            if got <= 0:
                break
            read += got
            if time.perf_counter() - started > seconds:
                break
        return read, time.perf_counter() - started
    finally:
        view.release()
        os.close(fd)


def write_then_read(path: str, size: int, block: int, write_s: float,
                    read_s: float) -> Dict[str, Any]:
    """Write `size` bytes to `path` in `block`-byte writes and fsync (stopping early,
    at a whole block, past `write_s`), then read them back (past `read_s`, stopping):
    {"direct", "write_bytes", "write_s", "read_bytes", "read_s"}."""
    buf = _buffer(block)
    try:
        direct, written, wrote_s = _write(path, buf, size, write_s)
        read, read_took = _read(path, buf, written, direct, read_s)
    finally:
        buf.close()
    return {"direct": direct, "write_bytes": written, "write_s": wrote_s,
            "read_bytes": read, "read_s": read_took}
