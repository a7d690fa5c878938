"""``invoke traces``: a local trace viewer (Arize Phoenix), and every run of this checkout sent to it while it runs.

The viewer keeps its data on disk in ``.miniagent/phoenix/`` (ignored by git) and is stopped, with every process
it started, on Ctrl-C or SIGTERM. While it runs, ``.miniagent/viewer.json`` names its OTLP endpoint, and a run
whose ``traces`` setting is left empty sends its spans there (see :mod:`miniagent.telemetry.settings`).
Run it directly as ``python -m miniagent.lab.commands.traces [--host HOST] [--port PORT]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Sequence

from ...processes import stop_group, stops_unwind
from ...serving.start import STOP_GRACE_S
from ...telemetry.settings import VIEWER_FILE
from ..catalogue import ROOT

DATA = ROOT / ".miniagent" / "phoenix"
PHOENIX = [sys.executable, "-m", "phoenix.server.main", "serve"]
READY_S = 120.0  # Phoenix's first start creates its database: tens of seconds on 2 cores


class ViewerNotReady(RuntimeError):
    pass


def wait_until_it_serves(url: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ViewerNotReady(f"the viewer exited during start-up (exit code {process.returncode})")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise ViewerNotReady(f"{url} did not answer within {timeout_s:g} s")


def serve(host: str = "127.0.0.1", port: int = 6006, *, command: Sequence[str] = PHOENIX, data: Path = DATA,
          viewer_file: Path = VIEWER_FILE, ready_timeout_s: float = READY_S, on_ready=None) -> int:
    """Run the viewer until Ctrl-C or SIGTERM; runs are sent to it meanwhile. Returns the exit status."""
    if list(command) == PHOENIX and importlib.util.find_spec("phoenix") is None:
        print("Arize Phoenix is not installed: pip install -e '.[viewer]' (then invoke traces again)", file=sys.stderr)
        return 1
    data.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(data), "PHOENIX_HOST": host, "PHOENIX_PORT": str(port)}
    log = open(data / "viewer.log", "a", encoding="utf-8")  # noqa: SIM115 - closed below
    process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                               env=env, start_new_session=True)
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    try:
        with stops_unwind():
            wait_until_it_serves(url, process, ready_timeout_s)
            viewer_file.parent.mkdir(parents=True, exist_ok=True)
            viewer_file.write_text(json.dumps({"endpoint": url, "pid": process.pid}), encoding="utf-8")
            print(f"Trace viewer: {url}  (its data: {data}; its log: {data / 'viewer.log'})\n"
                  "Every run of this checkout sends its spans there now (invoke ask, exp, eval...); Ctrl-C stops it.",
                  flush=True)
            if on_ready is not None:
                on_ready(url)
            process.wait()
            print(f"the viewer exited by itself (exit code {process.returncode}): see {data / 'viewer.log'}",
                  file=sys.stderr)
            return 1
    except ViewerNotReady as err:
        print(f"{err}: see {data / 'viewer.log'}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SystemExit):
        return 0
    finally:
        viewer_file.unlink(missing_ok=True)  # before the stop: no run may be sent to a viewer on its way out
        stop_group(process, STOP_GRACE_S)
        log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m miniagent.lab.commands.traces", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0: a teacher's viewer, for a whole class")
    parser.add_argument("--port", type=int, default=6006)
    args = parser.parse_args(argv)
    return serve(args.host, args.port)


if __name__ == "__main__":
    sys.exit(main())
