"""Figures in words, as tables, reports and summaries print them: "1 GPU", "8 GPUs",
"700 W (200-700)"."""

from __future__ import annotations

import re


def counted(n: int, noun: str) -> str:
    """`n` and the noun, plural unless `n` is 1: "1 GPU", "3 GPUs"."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def power_limit(limit_w: float | None, low_w: float | None, high_w: float | None,
                missing: str = "-") -> str:
    """A power limit with the range it may be set in, where known: "700 W (200-700)";
    `missing` where the limit is not visible."""
    if limit_w is None:
        return missing
    text = f"{limit_w:g} W"
    if low_w is not None and high_w is not None:
        text += f" ({low_w:g}-{high_w:g})"
    return text


def normal_label(label: str) -> str:
    """"H100 SXM5 80GB", "h100-sxm5-80gb" and "H100_SXM5_80GB" are one label."""
    return re.sub(r"[\s_\-]+", "", label).lower()
