#!/usr/bin/env python3
"""Plots achieved share over time from the share benchmarks' CSV files (target/bench/shares-*.csv) into
one PNG, docs/shares.png. Installs matplotlib into target/pydeps when it is missing."""
import csv
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

TITLES = {
    "a": "(a) two vGPUs 30/70",
    "b": "(b) four vGPUs 10/20/30/40",
    "c": "(c) share changed live 30 -> 60",
    "d": "(d) one vGPU idle, others absorb",
    "e": "(e) a high-priority vGPU arrives",
}


def main():
    bench = os.path.join(ROOT, "target", "bench")
    found = [k for k in TITLES if os.path.exists(os.path.join(bench, f"shares-{k}.csv"))]
    if not found:
        sys.exit("no target/bench/shares-*.csv: run the share benchmarks first")
    fig, axes = plt.subplots(len(found), 1, figsize=(10, 2.6 * len(found)), squeeze=False)
    for ax, key in zip(axes[:, 0], found):
        with open(os.path.join(bench, f"shares-{key}.csv")) as f:
            rows = list(csv.reader(f))
        names, data = rows[0][1:], rows[1:]
        t = [float(r[0]) for r in data]
        for i, name in enumerate(names):
            ax.plot(t, [float(r[i + 1]) for r in data], label=name, linewidth=1)
        ax.set_title(TITLES[key])
        ax.set_ylabel("share of engine (%)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("time (s), 100 ms steps")
    fig.tight_layout()
    out = os.path.join(ROOT, "docs", "shares.png")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig.savefig(out, dpi=90)
    print(out)


if __name__ == "__main__":
    main()
