//! Benchmark helpers shared by the bench targets.
