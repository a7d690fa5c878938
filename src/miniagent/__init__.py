"""miniagent: a guarded ReAct grammar tutor, built to teach why agent loops must stop."""

__version__ = "0.1.0"
