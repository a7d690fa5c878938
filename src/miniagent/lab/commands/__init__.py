"""What ``invoke`` runs: the exercise loop, experiments and reports, the maintainers' checks, the benchmarks."""
