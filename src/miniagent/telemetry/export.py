"""The OpenTelemetry SDK, set up for one process (the agent's, or the MCP server's) when runs are traced.

The only module that imports the SDK, and only when :func:`start` is called: with traces off nothing here is
loaded. OTLP over HTTP goes wherever the standard ``OTEL_EXPORTER_OTLP_*`` variables say (by default
http://localhost:4318); a file gets OTLP JSON, one export per line, both processes appending to it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (BatchSpanProcessor, SimpleSpanProcessor, SpanExporter,
                                            SpanExportResult)
from google.protobuf.json_format import MessageToDict

from .settings import TraceSettings, export_to, viewer_to_send_to
from .spans import SEMCONV_VERSION


class OtlpJsonLines(SpanExporter):
    """OTLP JSON in a file, one ExportTraceServiceRequest per line (the collector's file exporter's format):
    ids in hex, as OTLP/JSON has them."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        for resource in request.get("resourceSpans", []):  # none when there were no spans
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if span.get(key):
                            span[key] = _hex(span[key])
        line = (json.dumps(request, separators=(",", ":")) + "\n").encode()
        # One write to a file opened for appending: the agent's lines and the server's never interleave.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS


def _hex(b64: str) -> str:
    import base64

    return base64.b64decode(b64).hex()


def start(settings: TraceSettings, service: str, send_every_s: float = 5.0) -> TracerProvider | None:
    """Set this process's tracer provider (the MCP SDK's spans use it too); None when runs are not traced.
    Call ``shutdown()`` on what it returns before the process ends: it sends what is still queued. Over OTLP,
    spans are sent in batches every ``send_every_s`` (a process killed without a word loses at most that much)."""
    export = export_to(settings)
    if export is None:
        return None
    if settings.traces == export:  # asked for by name: that beats the SDK's switch, which would make it a no-op
        os.environ.pop("OTEL_SDK_DISABLED", None)
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    if export == "file":  # each span written as it ends: a run killed afterwards loses only its open spans
        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLines(settings.traces_file)))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # The SDK's variables name the endpoint; without them, the viewer `invoke traces` runs, if any.
        viewer = viewer_to_send_to()
        exporter = OTLPSpanExporter(endpoint=f"{viewer}/v1/traces") if viewer else OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=int(send_every_s * 1000)))
    trace.set_tracer_provider(provider)
    return provider


def tracer() -> trace.Tracer:
    return trace.get_tracer("miniagent", schema_url=f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}")


def read_spans(path: str | os.PathLike) -> list[dict]:
    """The spans of an :class:`OtlpJsonLines` file, flat: name, ids, kind, status, service, attributes, events."""
    spans = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        for resource in json.loads(line).get("resourceSpans", []):
            service = _values(resource.get("resource", {}).get("attributes", [])).get(SERVICE_NAME)
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    spans.append({
                        "name": span["name"], "trace_id": span["traceId"], "span_id": span["spanId"],
                        "parent_id": span.get("parentSpanId") or None, "kind": span.get("kind", 0),
                        "status": span.get("status", {}).get("code", 0), "service": service,
                        "scope": scope.get("scope", {}).get("name"),
                        "start_ns": int(span["startTimeUnixNano"]), "end_ns": int(span["endTimeUnixNano"]),
                        "attributes": _values(span.get("attributes", [])),
                        "events": [{"name": e["name"], "attributes": _values(e.get("attributes", []))}
                                   for e in span.get("events", [])]})
    return spans


def _values(attributes: list[dict]) -> dict:
    return {a["key"]: _value(a.get("value", {})) for a in attributes}


def _value(value: dict):
    if "arrayValue" in value:
        return [_value(v) for v in value["arrayValue"].get("values", [])]
    if "intValue" in value:
        return int(value["intValue"])
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    return None
