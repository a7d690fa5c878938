"""``python -m miniagent``: the command line (:mod:`miniagent.cli`), ended without the interpreter's teardown."""

import atexit
import logging
import os
import sys

from .cli import main

code = main()
# By now the run is over: its MCP server stopped and reaped, its model freed, its trace closed, its outcome
# printed. What is left is Python unloading the MCP SDK, numpy and llama.cpp's bindings object by object: about
# 0.14 s of every command (median of 7 whole processes on 2 cores). So the exit handlers run, the streams are
# flushed, and the process ends with its status; only that unloading is skipped.
atexit._run_exitfuncs()
logging.shutdown()
try:
    sys.stdout.flush()
    sys.stderr.flush()
except (OSError, ValueError):  # a closed pipe: let the interpreter report it as it always does
    sys.exit(code)
os._exit(code if isinstance(code, int) else 1)
