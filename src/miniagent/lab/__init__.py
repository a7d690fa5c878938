"""The lab: what runs the agent and teaches with it.

The session and the eval; the break catalogue and its patches; ``harness/`` (a run under a deadline, its
process tree watched); ``learner/`` (progress and notebook); ``commands/``, what a learner runs through
``invoke``; ``maintainers/``, what a maintainer runs; ``screen.py``, the terminal both print to; ``words/``,
every sentence a learner reads.
"""
