"""The lab: what runs the agent and teaches with it.

``session.py`` wires a model and the tools to the agent; ``evaluation.py`` scores it; ``model_server.py``
starts a class's model server. ``catalogue.py`` reads the breaks (``breaks/*/break.toml``); ``patching.py``
applies them to the learner's tree or to a throwaway copy. ``harness/`` runs the agent under a deadline and
watches its process tree; ``learner/`` keeps a learner's progress and notebook; ``commands/`` is what
``invoke`` runs (the exercise loop, experiments, the maintainers' checks, the benchmarks).
"""
