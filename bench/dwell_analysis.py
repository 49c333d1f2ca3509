"""Tables from one device call's dwell.json and fidelity.json (bench/harness_dwell.py and
bench/harness_fidelity.py), offline: no GPU needed.

    python3 bench/dwell_analysis.py bench/records/2026-11-23-h100-card8-1752824029441

Dwell, per segment: load span (GPU clock, from its first to its last run); median TFLOP/s of
its runs over its second half (and over the whole segment); range of per-second mean
TFLOP/s over the second half; per-run CV over the second half; SM clock and power medians
of NVML samples over the second half; and the state of each 1 s of NVML medians over the
whole segment (L: >=1425 MHz and <694.5 W; H: >=695 W and <1425 MHz; else neither), the same
definition and the same 1 s bins (whole seconds from the load origin) as
bench/harness_dwell.py's summary, which is cross-checked.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def state(mhz: float, watts: float) -> str:
    if watts >= 695.0 and mhz < 1425.0:
        return "H"
    if watts < 694.5 and mhz >= 1425.0:
        return "L"
    return "?"


def tf(size: int, ms: float) -> float:
    return 2.0 * size**3 / (ms * 1e-3) / 1e12


def load(path: Path) -> Any:
    """FILE, or FILE.gz as bench/records keeps the larger ones."""
    if path.exists():
        return json.loads(path.read_text())
    return json.loads(gzip.decompress(path.with_name(path.name + ".gz").read_bytes()))


def dwell(path: Path) -> None:
    d = load(path)
    size, tele = d["size"], d["telemetry"]  # tele: [t, sm MHz, mem MHz, W, C, reasons]
    print(f"## dwell, card {d['serial']}, plan {d['plan']}, correctness {d['correctness']}")
    names = {"f": "f memset", "w": "w none", "g": "g graph", "r": "r read"}
    print("| load, s | separator | TFLOP/s (2nd half; whole) | per second (2nd half) | "
          "per-run CV (2nd half) | SM MHz | W | max C | state (L/H/neither) |")
    print("|---|---|---|---|---|---|---|---|---|")
    per_sec_lines = []
    for seg, summ in zip(d["segments"], d["summary"], strict=True):
        rows = seg["rows"]
        t_a, t_b = rows[0][0], rows[-1][0]
        mid = (t_a + t_b) / 2
        late = [ms for t, ms in rows if t >= mid]
        whole = [ms for _, ms in rows]
        cv = statistics.pstdev(late) / statistics.mean(late)
        lt = [x for x in tele if mid <= x[0] <= t_b]
        mhz = statistics.median(x[1] for x in lt)
        watts = statistics.median(x[3] for x in lt)
        tmax = max(x[4] for x in lt)
        ps = []
        counts = {"L": 0, "H": 0, "?": 0}
        for sec in range(int(t_a), int(t_b) + 1):
            chunk = [ms for t, ms in rows if sec <= t < sec + 1]
            c = [x for x in tele if sec <= x[0] < sec + 1 and t_a <= x[0] <= t_b]
            if not c:
                continue
            m, w = statistics.median(x[1] for x in c), statistics.median(x[3] for x in c)
            s = state(m, w)
            counts[s] += 1
            tfs = tf(size, sum(chunk) / len(chunk)) if chunk else float("nan")
            if sec >= int(mid):
                ps.append(tfs)
            per_sec_lines.append(f"{sec:4d} s {seg['kind']} {tfs:6.1f} TFLOP/s {m:6.1f} MHz "
                                 f"{w:6.1f} W {max(x[4] for x in c):3.0f} C {s}")
        ok = summ["all"]["seconds_L_H_other"] == [counts["L"], counts["H"], counts["?"]]
        print(f"| {t_a:.0f}-{t_b:.0f} | {names.get(seg['kind'], seg['kind'])} | "
              f"{tf(size, statistics.median(late)):.1f}; {tf(size, statistics.median(whole)):.1f}"
              f" | {min(ps):.0f}-{max(ps):.0f} | {cv * 100:.2f}% | {mhz:.0f} | {watts:.1f} | "
              f"{tmax:.0f} | {counts['L']}/{counts['H']}/{counts['?']}"
              f"{'' if ok else ' (summary says ' + str(summ['all']['seconds_L_H_other']) + ')'} |")
    print("\nper second (whole-second bins of the load clock, telemetry inside the segment):")
    print("\n".join(per_sec_lines))


def fidelity(path: Path) -> None:
    d = load(path)
    ref = d["reference"]
    print(f"\n## fidelity, {d['device']}, serial {d['serial']}, driver {d['driver']}, "
          f"torch {d['torch']}")
    print("| method | median TFLOP/s | spread over 5 repeats | vs reference | "
          "wall per repeat, median (range) |")
    print("|---|---|---|---|---|")
    for row in d["table"]:
        walls = [r["wall_s"] for r in d["runs"][row["method"]]]
        print(f"| {row['method']} | {row['median_tflops']:.1f} | {row['spread'] * 100:.2f}% | "
              f"{row['vs_reference'] * 100:+.2f}% | {statistics.median(walls):.1f} s "
              f"({min(walls):.1f}-{max(walls):.1f}) |")
    rt = ref["telemetry"]
    mhz = sorted({x[0] for x in ref["per_5s_mhz_w_c"][len(ref["per_5s_mhz_w_c"]) // 2:]})
    print(f"| reference (graph replays, last 30 s of 60) | {ref['tflops']:.1f} | per 5 s: "
          f"{min(ref['per_5s'][6:]):.1f}-{max(ref['per_5s'][6:]):.1f} | | 60 s; "
          f"{rt['sm_clock_mhz_median']:.0f} MHz median ({mhz[0]:.0f}-{mhz[-1]:.0f} per 5 s), "
          f"{rt['power_w_median']:.1f} W, {rt['temperature_c_max']:.0f} C max |")
    print(f"reference per 5 s: {ref['per_5s']}")
    mhz_w_c = [[a, round(b, 1), c] for a, b, c in ref["per_5s_mhz_w_c"]]
    print(f"reference per 5 s MHz/W/C: {mhz_w_c}")
    for name, runs in d["runs"].items():
        print(f"\n{name}: values " + ", ".join(f"{r['tflops']:.1f}" for r in runs))
        for i, r in enumerate(runs, 1):
            if "measurement" not in r:
                print(f"  {i}: {r['tflops']:.1f} ({r['wall_s']:.1f} s)")
                continue
            t, m = r["telemetry"], r["measurement"]
            pts = "; ".join(f"{p['tflops']:.1f} x{p['share']:.2f} @{p['sm_clock_mhz']} MHz "
                            f"{p['power_w']:.1f} W ({state(p['sm_clock_mhz'], p['power_w'])})"
                            for p in m["operating_points"])
            flags = [k for k, v in r["flags"].items() if v]
            reasons = t.get("reason_shares")
            print(f"  {i}: {r['tflops']:.1f} | points {pts} | SM {t['sm_clock_mhz_median']} MHz, "
                  f"{t['power_w_median']:.1f} W, {t['temperature_c_max']:.0f} C max | "
                  f"{r['state']} after {r['warmup_s']:.1f} s, measured {m['seconds']:.1f} s "
                  f"({m['sub_windows']} windows, extended {m['extended']}) | runs {r['runs']}, "
                  f"CV {r['cv'] * 100:.2f}% | wall {r['wall_s']:.1f} s | flags {flags} | "
                  f"reasons {reasons} | flush: {r['l2_flush']} | correct "
                  f"{r['correctness']['passed']} ({r['correctness']['max_rel_error']:.4f})")
            print("     sub-window trimmed means, TFLOP/s: " + ", ".join(
                f"{tf(d['size'], ms):.1f}" for ms in m["sub_window_trimmed_means_ms"]))


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    dwell(folder / "dwell.json")
    fidelity(folder / "fidelity.json")
