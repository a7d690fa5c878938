"""Whether runs are traced with OpenTelemetry, and where the spans go: off unless asked.

Read from the same layers as every other setting; with ``traces`` left empty, the SDK's own variables decide:
an ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) turns it on, ``OTEL_SDK_DISABLED=true`` off; and
so does the viewer ``invoke traces`` runs in this checkout, while it runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..agent.config import ConfigError

# The variables the MCP server reads (the client hands them over: it gets no other variable of ours).
TRACES_ENV, TRACES_FILE_ENV = "MINIAGENT_TRACES", "MINIAGENT_TRACES_FILE"
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
EXPORTS = ("otlp", "file")
# Written by `invoke traces` while its viewer runs: {"endpoint": "http://127.0.0.1:6006", "pid": ...}.
VIEWER_FILE = Path(__file__).resolve().parents[3] / ".miniagent" / "viewer.json"


@dataclass
class TraceSettings:
    traces: str = ""  # "" (on when an OTLP endpoint variable is set) | off | otlp | file
    traces_file: str = "runs/traces.otlp.jsonl"  # with traces = file: OTLP JSON, one export per line


def check(settings: TraceSettings) -> None:
    if settings.traces not in ("", "off", *EXPORTS):
        raise ConfigError(f"traces must be off, otlp or file (or left empty), not {settings.traces!r}")
    if settings.traces == "file" and not settings.traces_file.strip():
        raise ConfigError("traces = file needs a traces_file")


def export_to(settings: TraceSettings, environ: Mapping[str, str] = os.environ,
              viewer: Path = VIEWER_FILE) -> str | None:
    """"otlp", "file", or None: runs are not traced."""
    if settings.traces in EXPORTS:
        return settings.traces
    if settings.traces == "off" or environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    return "otlp" if otlp_endpoint(environ) or viewer_endpoint(viewer) else None


def otlp_endpoint(environ: Mapping[str, str] = os.environ) -> str | None:
    """The endpoint the SDK's own variables name, if any."""
    return next((environ[name].strip() for name in ENDPOINTS if environ.get(name, "").strip()), None)


def viewer_endpoint(viewer: Path = VIEWER_FILE) -> str | None:
    """The OTLP endpoint of the viewer `invoke traces` runs in this checkout; None when none is running."""
    try:
        said = json.loads(viewer.read_text(encoding="utf-8"))
        os.kill(int(said["pid"]), 0)  # still running (a stale file from a viewer killed by SIGKILL is not)
        return str(said["endpoint"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def viewer_to_send_to(environ: Mapping[str, str] = os.environ, viewer: Path = VIEWER_FILE) -> str | None:
    """The running viewer's endpoint, unless the SDK's own variables name one (they win)."""
    return None if otlp_endpoint(environ) else viewer_endpoint(viewer)


def server_env(settings: TraceSettings, environ: Mapping[str, str] = os.environ,
               viewer: Path = VIEWER_FILE) -> dict[str, str]:
    """What the MCP server needs to trace its side of the same runs: nothing when they are not traced."""
    export = export_to(settings, environ, viewer)
    if export is None:
        return {}
    # The SDK's variables (the service, the headers, the sampler...); its switch is decided already.
    env = {name: value for name, value in environ.items() if name.startswith("OTEL_") and name != "OTEL_SDK_DISABLED"}
    if export == "otlp" and (endpoint := viewer_to_send_to(environ, viewer)):
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    env[TRACES_ENV] = export
    if export == "file":
        env[TRACES_FILE_ENV] = str(Path(settings.traces_file).resolve())
    return env


def sandbox_env(checkout: Path, environ: Mapping[str, str] = os.environ, viewer: Path = VIEWER_FILE) -> dict[str, str]:
    """For a run of this checkout's code in a copy of it (``invoke exp``): the copy has no viewer file of its own,
    and a traces file inside it would be deleted with it. The viewer's endpoint, and the checkout's runs/."""
    env = {}
    if endpoint := viewer_to_send_to(environ, viewer):
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    # A file named relative to where the learner is, not to the copy the run starts in.
    env[TRACES_FILE_ENV] = str(Path(environ.get(TRACES_FILE_ENV) or checkout / TraceSettings.traces_file).resolve())
    return env


def from_server_env(environ: Mapping[str, str] = os.environ) -> TraceSettings:
    """The server's side of :func:`server_env`."""
    return TraceSettings(traces=environ.get(TRACES_ENV, "off"), traces_file=environ.get(TRACES_FILE_ENV, ""))
