#!/usr/bin/env bash
# Runs the compute-share benchmarks (a)-(h) with their default durations (25 + 25 + 20 + 25 + 15 + 15 + 5 s,
# and 7 × 15 s for (h), plus start-up: about five minutes), one after the other so they never compete for the engine or the
# CPUs, then the soft-memory benchmarks (`softmem`: allocation latency, swap throughput, defragmentation;
# about a minute), then the daemon API's cost (`api`: one `stats` request, client and daemon side; about
# 20 s), then what the shim adds to a launch and an allocation (`overhead`, issue 15: a C client natively,
# under the shim and in vGPUs, interleaved; about two minutes), then a Prometheus scrape of the daemon with 64
# vGPUs (`metrics`, issue 16: target ≤ 5 ms; about 30 s), then the Kubernetes device plugin's `Allocate` and
# resident memory (`k8s`, issue 19: p99 ≤ 50 ms, ≤ 30 MiB; a few seconds), then plots docs/shares.png. The host's load is printed before and after: the benchmarks
# measure a simulated engine and device whose timing depends on the host scheduling its threads promptly.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --workspace
echo "== host: $(nproc) CPUs; uptime before: $(uptime)"
for scenario in a b c d e f g h; do
    ./target/release/shares "$scenario"
done
./target/release/softmem
./target/release/api
./target/release/overhead
./target/release/metrics
./target/release/k8s
echo "== uptime after: $(uptime)"
python3 benches/plot.py
