"""A card kept at load while the job suite sets up, so that its soak starts where the
matmul left the card.

Between the matmul's last window and the training step's first, the job's set-up (the
utilization reading, the gates, building the stack, its first step: ~8 s on an H100)
leaves the card near idle. On a lent H100 that dropped the die 6-7 C, and the training
step, whose tokens/s held within 0.4% from its first window, then took 47-56 s to bring
its temperature back within the soak rule's 1.5 C a span
(bench/records/2026-11-27-h100-jobs-warm). A bf16 matmul on a stream of its own holds the
card near the matmul's heat through the set-up (698 W there against the training step's
692 W on that card). Nothing of the set-up is timed, so its kernels may share the card.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Deque, Optional

# The matmul's own shape: ~1.6 ms a product on an H100, so a stop is seen within a few ms.
SIZE = 8192
# Products queued ahead of the one waited for: enough to keep the card busy while the
# thread waits for the GIL behind the set-up's Python.
DEPTH = 8


class Warmer:
    """bf16 SIZE^3 products on `device`, back to back on a stream of their own, from
    `start` to `stop`; off the GPU, or where the card has no room for them, nothing."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.device = device
        self.error: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = 0.0
        self.seconds: Optional[float] = None

    def start(self) -> "Warmer":
        if self.device.type != "cuda":
            return self
        # Started again after a stop (the compile, agent/job/suite.py): a new run.
        self._stop.clear()
        self.error = None
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name=f"fleet-warm{self.device}",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        torch = self.torch
        try:
            stream = torch.cuda.Stream(device=self.device)
            with torch.cuda.device(self.device), torch.cuda.stream(stream):
                a = torch.randn(SIZE, SIZE, device=self.device, dtype=torch.bfloat16)
                b = torch.randn(SIZE, SIZE, device=self.device, dtype=torch.bfloat16)
                c = torch.empty_like(a)
                pending: Deque[Any] = deque()
                while not self._stop.is_set():
                    torch.matmul(a, b, out=c)
                    done = torch.cuda.Event()
                    done.record(stream)
                    pending.append(done)
                    if len(pending) > DEPTH:
                        pending.popleft().synchronize()
                stream.synchronize()
                del a, b, c
        except Exception as exc:  # the job runs on without it; the soak just takes longer
            self.error = f"{type(exc).__name__}: {str(exc)[:200]}"

    def stop(self) -> Optional[float]:
        """Stop, wait for the last product, free its memory: seconds it held the card,
        None where it did not run."""
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.torch.cuda.empty_cache()
        if self.error is None:
            self.seconds = round(time.perf_counter() - self._started, 3)
        return self.seconds
