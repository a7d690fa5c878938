"""What a maintainer runs: the breaks' check, the docs' measured results, counterexamples, mutation testing,
the benchmarks and a class's load. A learner's commands are in ``lab/commands/``."""
