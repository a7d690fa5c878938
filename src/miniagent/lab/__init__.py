"""The lab: what runs the agent and teaches with it.

``session.py`` wires a model and the tools to the agent; ``evaluation.py`` scores it. ``catalogue.py`` reads the
breaks (``breaks/*/break.toml``); ``patching.py`` applies them to the learner's tree or to a throwaway copy.
``harness/`` runs the agent under a deadline and watches its process tree; ``learner/`` keeps a learner's
progress and notebook. ``commands/`` is what a learner runs through ``invoke`` (the exercise loop, predictions,
experiments); ``maintainers/`` what a maintainer runs (the breaks' check, the docs' results, mutation testing,
the benchmarks). ``screen.py`` is the terminal both print to; ``words/`` every sentence a learner reads.
"""
