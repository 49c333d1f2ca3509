"""Counts in words, as reports and summaries print them: "1 GPU", "8 GPUs"."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """`n` and the noun, plural unless `n` is 1: "1 GPU", "3 GPUs"."""
    return f"{n} {noun}{'s' if n != 1 else ''}"
