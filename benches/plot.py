#!/usr/bin/env python3
"""Plots achieved share over time from the share benchmarks' output (target/bench/shares-*.csv, with the
reference lines and marked instants of shares-*.json beside each) into one PNG, docs/shares.png: one panel
per scenario (a)-(f), plus a 1 ms-resolution excerpt of (e). Installs matplotlib into target/pydeps when it
is missing."""
import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPS = os.path.join(ROOT, "target", "pydeps")
sys.path.insert(0, DEPS)
try:
    import matplotlib
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--target", DEPS, "matplotlib"])
    import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = {
    "a": ("(a) two vGPUs 30/70", "time (s), share per 100 ms"),
    "b": ("(b) four vGPUs 10/20/30/40", "time (s), share per 100 ms"),
    "c": ("(c) share changed live: a 30 -> 60, b 70 -> 40", "time (s), share per 100 ms"),
    "d": ("(d) idle30 idle: b30 and c40 absorb its share", "time (s), share per 100 ms"),
    "e": ("(e) high-priority hi (30) arrives in bursts beside n40 and n30", "time (s), share per 100 ms"),
    "e-zoom": ("(e) 60 ms excerpt: the normal vGPUs yield while hi's burst runs", "time (ms)"),
    "f": ("(f) a20 alone, idle30 and idle50 idle: a20 absorbs the device", "time (s), share per 100 ms"),
}


def load_meta(bench, key):
    path = os.path.join(bench, f"shares-{key}.json")
    if not os.path.exists(path):
        return {"lines": [], "events": [], "note": ""}
    with open(path) as f:
        return json.load(f)


def title(ax, key, meta):
    text, xlabel = PANELS[key]
    ax.set_title(text + (f"  [{meta['note']}]" if meta.get("note") else ""), fontsize=10)
    ax.set_xlabel(xlabel, fontsize=8)


def timeline(ax, bench, key):
    """Every kernel of the excerpt as a bar on its vGPU's row: who had the engine when."""
    with open(os.path.join(bench, f"shares-{key}.csv")) as f:
        rows = list(csv.DictReader(f))
    meta = load_meta(bench, key)
    names = list(dict.fromkeys(r["vgpu"] for r in rows))
    for i, name in enumerate(names):
        bars = [(float(r["start_ms"]), float(r["end_ms"]) - float(r["start_ms"])) for r in rows if r["vgpu"] == name]
        ax.broken_barh(bars, (i - 0.35, 0.7), color=f"C{i}", edgecolor="white", linewidth=0.3)
    for i, ev in enumerate(meta["events"]):
        ax.axvline(ev["t"], color="black", linestyle=":", linewidth=0.9, label=ev["label"] if i == 0 else None)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.grid(alpha=0.3, axis="x")
    if meta["events"]:
        ax.legend(loc="upper right", fontsize=7)
    title(ax, key, meta)


def panel(ax, bench, key):
    if key == "e-zoom":
        return timeline(ax, bench, key)
    with open(os.path.join(bench, f"shares-{key}.csv")) as f:
        rows = list(csv.reader(f))
    names, data = rows[0][1:], rows[1:]
    t = [float(r[0]) for r in data]
    meta = load_meta(bench, key)
    colors = []
    for i, name in enumerate(names):
        (line,) = ax.plot(t, [float(r[i + 1]) for r in data], label=name, linewidth=1)
        colors.append(line.get_color())
    for ref in meta["lines"]:
        # A reference line spans the run unless it says from/to (a share changed live).
        x0, x1 = ref.get("from", t[0]), ref.get("to", t[-1])
        style = ref.get("style", "--")
        ax.plot([x0, x1], [ref["value"], ref["value"]], linestyle=style, linewidth=0.9, color=colors[ref["series"]])
    for i, ev in enumerate(meta["events"]):
        ax.axvline(ev["t"], color="gray", linestyle=":", linewidth=0.9, label=ev["label"] if i == 0 else None)
    title(ax, key, meta)
    ax.set_ylabel("share of engine (%)", fontsize=8)
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=7, ncol=2)


def main():
    bench = os.path.join(ROOT, "target", "bench")
    found = [k for k in PANELS if os.path.exists(os.path.join(bench, f"shares-{k}.csv"))]
    if not found:
        sys.exit("no target/bench/shares-*.csv: run the share benchmarks first (benches/run-all.sh)")
    fig, axes = plt.subplots(len(found), 1, figsize=(10, 2.7 * len(found)), squeeze=False)
    for ax, key in zip(axes[:, 0], found):
        panel(ax, bench, key)
    fig.tight_layout()
    out = os.path.join(ROOT, "docs", "shares.png")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig.savefig(out, dpi=90)
    print(out)


if __name__ == "__main__":
    main()
