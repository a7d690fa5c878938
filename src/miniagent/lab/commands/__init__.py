"""What a learner runs through ``invoke``: the exercise loop (break, check, watch, hint, progress), predictions
and experiments. The maintainers' tools are in ``lab/maintainers/``."""
