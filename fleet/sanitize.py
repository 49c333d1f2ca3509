"""Text that came from a host, made safe for a terminal.

rich renders `Text` without interpreting markup, but passes control characters through,
so a hostile host could move the cursor, retitle the terminal or paint a fake summary.
"""

from __future__ import annotations

import re

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def safe(text: str) -> str:
    """Host-supplied text with every control character made visible (ESC as \\x1b)."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
