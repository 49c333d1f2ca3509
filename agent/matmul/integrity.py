"""Does the card still compute the same product when hot? Bit-for-bit checks under load.

The correctness gate compares one product against float64, cold, before any time counts
(agent/matmul/harness.py). A card that computes wrong only when hot (silent data corruption) is
what acceptance suites look for by running the load and comparing its results: Imbue's
host validation compares a five-minute bf16 matmul's results bit for bit, gpu-burn
compares, DCGM's diagnostic runs a GEMM for minutes. The soaked load already runs the same
product on the same seeded inputs for one to three minutes; this module keeps a copy of
each GPU's first product under load and, once a soak window (2 s) or more since the last
check, compares the latest product with it bit for bit:

- on the GPU: the two matrices viewed as integers (int16 for bf16) and the differing
  elements counted by torch, queued on the product's own stream *between* chunks of
  timed runs (after a chunk's last stop event, before the next chunk's first start
  event), so no timed run contains it, and read back a chunk later, when it has long
  finished: the host never waits on it and the GPU never idles for it;
- its cost: an elementwise compare of two 128 MiB matrices (8192² bf16) reads 256 MiB,
  ~0.1-0.2 ms at an H100's ~3 TB/s, against ~1.6 ms for one matmul and ~2 s between
  checks: ~0.01% of the load's GPU time, a hundredth of the 1% allowed
  (`python3 bench/integrity_cost.py` measures it with and without the checks);
- its memory: the copy, 128 MiB a GPU at the standard size, and a 64 MiB bool
  temporary per check.

The same kernel on the same inputs gives the same bits on healthy cards: cuBLAS documents
bit-wise identical results run to run "on GPUs with the same architecture and the same
number of SMs" from one toolkit version (one stream per handle, as here). So each result
carries a digest of its first product, 62 bits from exact integer arithmetic on the int16
view (the same on any device and in any reduction order), and the controller compares the
digests of one node's GPUs of the same device, SM count, torch, CUDA runtime and cuBLAS
(fleet/analysis/matmul/integrity.py). torch does not say which kernel cuBLAS picked without a
profiler, so `kernel` is None and the stack stands in for it: GPUs whose stacks differ
are compared each against itself only.

A test hook: FLEET_INTEGRITY_FLIP_AFTER=N flips the low bit of one element of the product
before the (N+1)-th check, and the result says `injected` so that a constructed
corruption is never read as a card's.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

FLIP_ENV = "FLEET_INTEGRITY_FLIP_AFTER"
# Two primes below 2^31: each half of the digest is a weighted sum modulo one of them.
PRIMES = (2147483647, 2147483629)
DIGEST_BLOCK_ROWS = 512  # 512 x 8192 int64 = 32 MiB at a time


def digest(torch: Any, product: Any) -> str:
    """A 62-bit digest of the product's bits, as 16 hex digits: equal products, equal
    digests; one flipped bit anywhere changes both halves.

    Each 16-bit word x (offset to 0..65535) of row r, column c counts x·w(c) summed over
    the row modulo p, times v(r), summed modulo p: below 2^63 for rows of up to 2^26
    words, and exact integers, so neither the device nor the order of the sums matters.
    """
    words = product.contiguous().view(torch.int16).reshape(product.shape[0], -1)
    rows, cols = int(words.shape[0]), int(words.shape[1])
    device = words.device
    col = torch.arange(cols, dtype=torch.int64, device=device)
    row = torch.arange(rows, dtype=torch.int64, device=device)
    halves: List[int] = []
    for p, a, b in ((PRIMES[0], 40503, 1), (PRIMES[1], 92821, 7)):
        col_w = (col * a + b) % (1 << 20) + 1
        row_w = (row * a + b) % p + 1
        total = torch.zeros((), dtype=torch.int64, device=device)
        for r0 in range(0, rows, DIGEST_BLOCK_ROWS):
            x = words[r0:r0 + DIGEST_BLOCK_ROWS].to(torch.int64) + 32768
            sums = (x * col_w).sum(dim=1) % p
            total = total + ((sums * row_w[r0:r0 + DIGEST_BLOCK_ROWS]) % p).sum()
        halves.append(int(total.item()) % p)
    return f"{halves[0]:08x}{halves[1]:08x}"


def _flip_after() -> Optional[int]:
    raw = os.environ.get(FLIP_ENV, "").strip()
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


class Check:
    """One GPU's bit-for-bit checks of its product under load.

    `after_chunk(now)` is called between chunks of timed runs with the host time the last
    chunk was collected; `finish()` after the load, for the result's `integrity`.
    `temperature(at)` gives the card's temperature near host time `at` (the harness's
    telemetry), None where NVML does not answer.
    """

    def __init__(self, torch: Any, product: Any, stream: Any, load0: float,
                 interval_s: float, temperature: Any = None) -> None:
        self.torch = torch
        self.product = product
        self.stream = stream
        self.load0 = load0
        self.interval_s = interval_s
        self.temperature = temperature
        self.flip_after = _flip_after()
        self.reference: Any = None
        self.reference_s: Optional[float] = None
        self.last = 0.0
        self.queued = 0
        self.checks = 0
        self.mismatches = 0
        self.first_s: Optional[float] = None
        self.first_temperature_c: Optional[float] = None
        self.first_elements: Optional[int] = None
        self.max_elements = 0
        self.injected = False
        # (differing-element count on the device, its completion event, host time queued)
        self._pending: Optional[Any] = None

    def _on_stream(self) -> Any:
        if self.stream is None:
            import contextlib

            return contextlib.nullcontext()
        return self.torch.cuda.stream(self.stream)

    def after_chunk(self, now: float) -> None:
        """Between chunks: keep the first product, or, a check interval after the last
        check, queue the next comparison; read back the one before once it has run."""
        self._resolve(wait=False)
        if self.reference is None:
            with self._on_stream():
                self.reference = self.product.clone()
            self.reference_s = now - self.load0
            self.last = now
            return
        if now - self.last < self.interval_s or self._pending is not None:
            return
        self.last = now
        torch = self.torch
        with self._on_stream():
            # Elements, not bytes: a 4-byte dtype's words are compared whole.
            word = torch.int32 if self.product.element_size() == 4 else torch.int16
            latest = self.product.view(word)
            if self.flip_after is not None and self.queued >= self.flip_after \
                    and not self.injected:
                flat = latest.view(-1)
                flat[flat.numel() // 2] ^= 1
                self.injected = True
            differ = (latest != self.reference.view(word)).sum()
            event = None
            if self.stream is not None:
                event = torch.cuda.Event()
                event.record(self.stream)
        self.queued += 1
        self._pending = (differ, event, now)

    def _resolve(self, wait: bool) -> None:
        if self._pending is None:
            return
        differ, event, at = self._pending
        if event is not None and not event.query():
            if not wait:
                return
            event.synchronize()
        self._pending = None
        elements = int(differ.item())
        self.checks += 1
        if elements:
            self.mismatches += 1
            self.max_elements = max(self.max_elements, elements)
            if self.first_s is None:
                self.first_s = at - self.load0
                self.first_temperature_c = (self.temperature(at)
                                            if self.temperature is not None else None)
                self.first_elements = elements

    def finish(self) -> Dict[str, Any]:
        """The result's `integrity`: the checks, the first mismatch and the digest."""
        self._resolve(wait=True)
        if self.stream is not None:
            self.stream.synchronize()
        return {
            "checks": self.checks,
            "mismatches": self.mismatches,
            "interval_s": self.interval_s,
            "reference_s": _rounded(self.reference_s),
            "first_mismatch_s": _rounded(self.first_s),
            "first_mismatch_temperature_c": self.first_temperature_c,
            "first_mismatch_elements": self.first_elements,
            "max_elements": self.max_elements,
            "elements": int(self.product.numel()),
            "digest": digest(self.torch, self.reference) if self.reference is not None
            else None,
            # torch does not tell which cuBLAS kernel ran: the stack (provenance) stands in.
            "kernel": None,
            "injected": self.injected,
        }


def _rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 3)


def temperature_near(samples: Sequence[Sequence[float]], at: float) -> Optional[float]:
    """The temperature of the telemetry sample nearest host time `at` (NaN skipped)."""
    best: Optional[Sequence[float]] = None
    for sample in samples:
        if sample[4] == sample[4] and (best is None or abs(sample[0] - at) < abs(best[0] - at)):
            best = sample
    return None if best is None else float(best[4])
