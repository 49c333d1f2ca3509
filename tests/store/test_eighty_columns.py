"""Every `fleet results` view read at 80 columns (issue 56), from the lent nodes' real
documents (tests/report/real_scene.py): no line past 80, and no word split across lines
("varia"/"nt", "H200-"/"SXM-1"/"41GB", "power-c"/"p"). A word is whole when it is one of
the words the same view prints where the terminal is wide enough for nothing to wrap, or
a short name the view's own legend spells out under its table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleet.cli import main
from fleet.cli.terminal import Legend, fitted, hanging, short_variants
from fleet.store.database import open_engine, resolve
from fleet.store.schema import upgrade
from tests.report.real_scene import HOSTS, store_nights, store_real

VIEWS = ([], ["--summary"], ["--node"], ["--jobs"])
# A legend under a table, and the lines it wraps onto (set in by four spaces).
LEGEND = re.compile(r"^(variants|bench|flags): ")


@pytest.fixture(scope="module")
def real_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("eighty") / "fleet.db"
    engine = open_engine(resolve(f"sqlite:///{path}"))
    upgrade(engine)
    store_real(engine)
    store_nights(engine)
    engine.dispose()
    return f"sqlite:///{path}"


def _results(url: str, args: list[str], columns: int) -> str:
    done = CliRunner().invoke(main, ["results", *args, "--db", url],
                              env={"COLUMNS": str(columns)}, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.output


def _legend_words(text: str) -> set[str]:
    words: set[str] = set()
    inside = False
    for line in text.splitlines():
        inside = bool(LEGEND.match(line)) or (inside and line.startswith("    "))
        if inside:
            words |= set(line.split())
    return words


def _words(text: str) -> set[str]:
    return {w for w in text.split() if set(w) != {"─"}}  # a table's rule is no word


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: " ".join(v) or "default")
def test_each_view_reads_at_80_columns(real_url: str, view: list[str]) -> None:
    narrow, wide = _results(real_url, view, 80), _results(real_url, view, 400)
    assert max(len(line.rstrip()) for line in narrow.splitlines()) <= 80, narrow
    split = _words(narrow) - _words(wide) - _legend_words(narrow)
    assert not split, f"words split at 80 columns: {sorted(split)}\n{narrow}"
    # Every host the wide view names, the narrow one names whole.
    for _, host, *_ in HOSTS:
        assert (host in wide) == (host in narrow), host


def test_the_default_view_names_what_it_shortened(real_url: str) -> None:
    narrow = _results(real_url, [], 80)
    assert "variants: H100 = H100-SXM5-80GB; H200 = H200-SXM-141GB" in narrow
    # Flags in letters, spelled out; the benchmark said once above, or lettered below.
    assert re.search(r"^flags: P = power-cap", narrow, re.M)
    wide = _results(real_url, [], 400)
    assert "H200-SXM-141GB" in wide and "variants:" not in wide and "power-cap" in wide


def test_ingest_counts_say_only_what_is_not_zero(tmp_path: Path) -> None:
    """`fleet ingest`'s line counts what a document holds: a fingerprint-only document
    says its GPUs, not "0 matmul results, 0 node figures"."""
    # The 2x H100's job document: no matmul, no node suite.
    done = CliRunner().invoke(main, ["ingest", "--db", f"sqlite:///{tmp_path / 'f.db'}",
                                     str(HOSTS[5][2])], catch_exceptions=False)
    assert done.exit_code == 0
    (line,) = [line for line in done.output.splitlines() if line.startswith("stored ")]
    assert line.endswith(": document 1, 2 GPUs, 6 job figures"), line


def test_columns_keep_their_longest_word() -> None:
    rows = [["H200-SXM-141GB", "power-cap contended", "672.0"]]
    from rich.console import Console
    console = Console(width=34, record=True)
    console.print(fitted(["variant", "flags", ">TFLOP/s"], rows, 34))
    text = console.export_text()
    assert "H200-SXM-141GB" in text and "power-cap" in text and "contended" in text
    assert short_variants(["H200-SXM-141GB", "H100-SXM5-80GB", "H100-PCIe-80GB"]) == {
        "H200-SXM-141GB": "H200", "H100-SXM5-80GB": "H100-SXM5",
        "H100-PCIe-80GB": "H100-PCIe"}
    legend = Legend("variants")
    legend.add({"H200-SXM-141GB": "H200", "same": "same"})
    assert legend.line() == "variants: H200 = H200-SXM-141GB"
    assert hanging("a " * 30 + "supercalifragilistic", 20, "  ")[-1].strip() == \
        "supercalifragilistic"
