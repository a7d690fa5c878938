"""The conjugation MCP server: two tools over stdio, with lab faults on demand.

Run as ``python -m miniagent.tools.server [--delay SECONDS] [--hang-on VERB]``; the agent starts it through
:class:`~miniagent.tools.mcp_client.MCPClient`.  ``conjugate(verb, tense, person)`` gives ``"she has seen"``;
``list_tenses()`` the valid options, which a bad argument's tool error names too.  Faults are off by default.
stdout is the protocol.  Why: docs/maintainers.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only, keeps the import cheap
    from mcp.server.lowlevel import Server
    from opentelemetry.sdk.trace import TracerProvider

    from ..telemetry.settings import TraceSettings

SERVER_NAME = "miniagent-conjugation"
DELAY_ENV = "MINIAGENT_FAULT_DELAY"
HANG_ON_ENV = "MINIAGENT_FAULT_HANG_ON"
# Longer than any real verb or tense name; refusing early keeps a 10 KB
# argument out of the error text and out of the conjugation code.
MAX_ARG_CHARS = 64

_VERB_HINT = "Give an English verb in its base form, e.g. 'see', 'go', 'be'."


class ToolInputError(ValueError):
    """A bad call to a tool: the server answers it with a tool error (``isError: true``). ``refusal``: a verb
    refused as no verb the tool knows, as data; it goes with the error as its structured content."""

    def __init__(self, message: str, refusal: dict | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


# --------------------------------------------------------------------------
# Argument checking: one message per mistake, always naming the valid options
# --------------------------------------------------------------------------


def _tense_hint() -> str:
    from .conjugation import TENSES

    return "Valid tenses: " + ", ".join(TENSES) + "."


def _person_hint() -> str:
    from .conjugation import PERSONS, PRONOUNS

    return ("Valid persons: " + ", ".join(PERSONS) + "; or a pronoun: " + ", ".join(PRONOUNS)
            + "; or a subject such as 'the cat', 'my sisters', 'John'.")


def _hint_for(name: str) -> str:
    return {"verb": _VERB_HINT, "tense": _tense_hint(), "person": _person_hint()}[name]


def _with_hint(message: str, name: str) -> str:
    """Append the valid options for ``name`` unless the message already lists them."""
    hint = _hint_for(name)
    # The conjugation module's own messages may already name the options;
    # repeating them would only make the observation longer for the model.
    body = hint.split(": ", 1)[-1].rstrip(".")
    first_option = body.split(",")[0].strip()
    if name != "verb" and first_option and first_option in message:
        return message
    if name == "verb" and "give the base form" in message:  # 'went' is the past of 'go'; give ...
        return message
    return f"{message} {hint}"


def _check_text(name: str, value: Any) -> str:
    """Type, emptiness and size checks shared by the three arguments."""
    if value is None:
        raise ToolInputError(f"'{name}' is missing. {_hint_for(name)}")
    if not isinstance(value, str):
        raise ToolInputError(f"'{name}' must be a string, not {type(value).__name__}. {_hint_for(name)}")
    text = value.strip()
    if not text:
        raise ToolInputError(f"'{name}' is empty. {_hint_for(name)}")
    if len(text) > MAX_ARG_CHARS:
        too_long = f"'{name}' is too long ({len(text)} characters, at most {MAX_ARG_CHARS})."
        raise ToolInputError(f"{too_long} {_hint_for(name)}")
    return text


def conjugate_text(verb: Any, tense: Any, person: Any) -> str:
    """The tool's logic without the MCP wrapping: ``("see", "present perfect", "she")`` -> ``"she has seen"``.

    Raises :class:`ToolInputError` (which the server turns into an ``isError``
    result) for every kind of bad input.
    """
    from . import conjugation as cj

    verb_s = _check_text("verb", verb)
    tense_s = _check_text("tense", tense)
    person_s = _check_text("person", person)
    # Validate one argument at a time so the hint matches the argument at fault.
    checks = (
        ("tense", cj.normalize_tense, tense_s),
        ("person", cj.normalize_person, person_s),
        ("verb", cj.validate_verb, verb_s),
    )
    for name, check, value in checks:
        try:
            check(value)
        except cj.ConjugationError as exc:
            parts = cj.modal_stand_in_parts(value, tense_s, person_s) if name == "verb" else {}
            stand_in = cj.stand_in_sentence(parts)
            said = f"{exc} {stand_in}" if stand_in else _with_hint(str(exc), name)
            # The refusal as data, with the sentence that says it in English: the agent's no is made from it
            refusal = exc.refusal and {**exc.refusal, **parts, "text": f"{exc} {stand_in}".strip()}
            raise ToolInputError(said, refusal) from None
    try:
        phrase = cj.conjugate(verb_s, tense_s, person_s)
        return f"{cj.subject_for(person_s)} {phrase}"
    except cj.ConjugationError as exc:
        raise ToolInputError(f"{exc} {_tense_hint()} {_person_hint()}") from None
    except Exception as exc:  # a bug in the conjugator must still give the model a usable answer
        print(f"conjugate({verb_s!r}, {tense_s!r}, {person_s!r}) crashed: {exc!r}", file=sys.stderr, flush=True)
        failed = f"could not conjugate {verb_s!r} ({type(exc).__name__})."
        raise ToolInputError(f"{failed} {_tense_hint()} {_person_hint()}") from None


def list_tenses_text() -> str:
    """The discovery answer: short, readable, complete."""
    from .conjugation import PERSONS, PRONOUNS, TENSES

    pronouns = ", ".join(f"{p} ({PRONOUNS[p]})" for p in PRONOUNS)
    return (
        f"Tenses ({len(TENSES)}): " + ", ".join(TENSES) + ".\n"
        "Persons: " + ", ".join(PERSONS) + ".\n"
        f"Pronouns accepted as person: {pronouns}."
    )


# --------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------


def _wedge(verb: str) -> None:
    """Block the calling thread forever; called on the event loop, it wedges the whole server.

    Deliberately synchronous: an ``await`` would let the loop keep reading
    stdin, notice EOF when the client goes away, and exit cleanly.  A blocking
    wait holds the only loop thread, so nothing else in the process runs:
    no more requests, no EOF handling.  Only a signal (SIGTERM/SIGKILL) ends it.
    """
    print(f"fault: hanging on {verb!r}; this server is now wedged", file=sys.stderr, flush=True)
    threading.Event().wait()


# --------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------

_STRING = {"type": "string"}

CONJUGATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verb": {**_STRING, "description": "English verb in its base form, e.g. 'see', or a phrasal verb, e.g. 'give up'."},
        "tense": {**_STRING, "description": "A tense name, e.g. 'present perfect'. See list_tenses."},
        "person": {**_STRING, "description": "A person ('3rd singular'), a pronoun ('she') or a subject ('my sisters')."
                   " See list_tenses."},
    },
    "required": ["verb", "tense", "person"],
    "additionalProperties": False,
}
LIST_TENSES_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}

CONJUGATE_DESCRIPTION = 'Conjugate an English verb: returns the subject and verb phrase, e.g. "she has seen".'
LIST_TENSES_DESCRIPTION = "List the valid tenses, persons and pronouns for conjugate."
INSTRUCTIONS = "Conjugates English verbs. Call list_tenses to see the valid tenses and persons."


def server_version() -> str:
    """serverInfo.version: the installed miniagent package's version ("unknown" if it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("miniagent")
    except PackageNotFoundError:  # run from a source tree that was never pip-installed
        return "unknown"


def _check_arguments(tool: str, arguments: dict[str, Any], schema: dict[str, Any]) -> None:
    """The schema says ``additionalProperties: false``; the SDK does not enforce it, so this does."""
    unknown = sorted(set(arguments) - set(schema["properties"]))
    if unknown:
        names = ", ".join(repr(_shorten(name)) for name in unknown[:3]) + (", ..." if len(unknown) > 3 else "")
        takes = ", ".join(schema["properties"]) or "no arguments"
        raise ToolInputError(f"{tool} does not take {names}; it takes {takes}.")


def _shorten(text: str, limit: int = 30) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def build_server(delay: float = 0.0, hang_on: str | None = None) -> Server:
    """The MCP server with both tools; ``delay``/``hang_on`` are the faults."""
    from mcp import types
    from mcp.server.lowlevel import Server

    hang_key = hang_on.strip().lower() if hang_on else None
    read_only = types.ToolAnnotations(read_only_hint=True)
    tools = [
        types.Tool(name="conjugate", description=CONJUGATE_DESCRIPTION,
                   input_schema=CONJUGATE_SCHEMA, annotations=read_only),
        types.Tool(name="list_tenses", description=LIST_TENSES_DESCRIPTION,
                   input_schema=LIST_TENSES_SCHEMA, annotations=read_only),
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    # Async, and run on the event loop: the hang fault must block the server's
    # only loop thread (a worker thread would wedge only itself), and every
    # other answer is instant.
    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments or {}
        try:
            if params.name == "conjugate":
                _check_arguments("conjugate", arguments, CONJUGATE_SCHEMA)
                verb = arguments.get("verb")
                if hang_key is not None and isinstance(verb, str) and verb.strip().lower() == hang_key:
                    _wedge(verb)
                if delay > 0:
                    import anyio

                    await anyio.sleep(delay)  # awaited: the server stays responsive meanwhile
                text = conjugate_text(verb, arguments.get("tense"), arguments.get("person"))
            elif params.name == "list_tenses":
                _check_arguments("list_tenses", arguments, LIST_TENSES_SCHEMA)
                text = list_tenses_text()
            else:
                raise ToolInputError(f"Unknown tool {_shorten(params.name)!r}; the tools are conjugate and list_tenses.")
        except ToolInputError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], is_error=True,
                                        structured_content={"refusal": exc.refusal} if exc.refusal else None)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    # Only these two handlers: the capabilities the server announces are
    # derived from its handlers, so it announces tools and nothing else
    # (the SDK's ``MCPServer`` always announces prompts and resources, even empty).
    return Server(
        SERVER_NAME,
        version=server_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def _serve(server: Server) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _parser() -> argparse.ArgumentParser:
    summary = (__doc__ or "").split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m miniagent.tools.server", description=summary)
    parser.add_argument(
        "--delay", type=float, default=None, metavar="SECONDS",
        help=f"fault: seconds added to every conjugate call (env {DELAY_ENV})",
    )
    parser.add_argument(
        "--hang-on", default=None, metavar="VERB",
        help=f"fault: a conjugate call for VERB never answers; the server wedges (env {HANG_ON_ENV})",
    )
    return parser


def parse_faults(argv: list[str] | None = None, env: dict[str, str] | None = None) -> tuple[float, str | None]:
    """Flags win over env vars; both default to "no fault"."""
    parser = _parser()
    args = parser.parse_args(argv)
    env = os.environ if env is None else env
    delay = args.delay
    if delay is None:
        raw = env.get(DELAY_ENV, "").strip()
        try:
            delay = float(raw) if raw else 0.0
        except ValueError:
            parser.error(f"{DELAY_ENV}={raw!r} is not a number of seconds")
    if not delay >= 0:  # nan too: a delay no clock reaches
        parser.error(f"delay must be >= 0, got {delay}")
    hang_on = args.hang_on if args.hang_on is not None else env.get(HANG_ON_ENV, "")
    return delay, (hang_on.strip() or None)


def main(argv: list[str] | None = None) -> None:
    delay, hang_on = parse_faults(argv)
    if delay > 0:
        print(f"fault: delay {delay:g} s per call", file=sys.stderr, flush=True)
    if hang_on:
        print(f"fault: hang on verb {hang_on!r} (the server wedges on that call)", file=sys.stderr, flush=True)
    server = build_server(delay=delay, hang_on=hang_on)
    spans = _trace_calls()
    # The verb lexicon takes a few hundred ms to load: load it before serving,
    # so the handshake pays for it once and no tool call (with its own short
    # timeout) ever does.
    from .conjugation import preload

    preload()
    try:
        import anyio

        try:
            anyio.run(_serve, server)
        except* BrokenPipeError:  # the client died while we wrote to it: nobody is left to answer, nothing to say
            pass
    except KeyboardInterrupt:  # run by hand in a terminal: Ctrl-C is a normal way out
        pass
    # The client closed stdin and every answer is flushed: nothing is left to
    # clean up.  Skipping the interpreter's teardown of the SDK's big module
    # graph saves ~0.25 s on every client close.
    if spans is not None:  # the exit below skips every atexit handler, the SDK's flush among them
        spans.result().shutdown()
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _trace_calls() -> concurrent.futures.Future | None:
    """The SDK's tracer provider, being set up, when the client traces its runs (then the SDK's own middleware
    makes a span of each request, under the client's); None, and the SDK not loaded, otherwise."""
    from ..telemetry.settings import export_to, from_server_env

    settings = from_server_env()
    if export_to(settings) is None:
        return None
    # Set up beside the handshake, not before it: the client waits for the handshake, and a tool call comes only
    # once its model is loaded, long after; a request before it is done (the handshake) is not traced.
    tracing = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return tracing.submit(_start_tracing, settings)
    finally:
        tracing.shutdown(wait=False)


def _start_tracing(settings: TraceSettings) -> TracerProvider | None:
    """This process's tracer provider, and the watch that tells the trace when the server outlives its agent."""
    from ..telemetry import export, orphan

    # Sent often: the server has no SIGTERM handler (its client stops it), so what it still holds then is lost.
    provider = export.start(settings, "miniagent-conjugation-server", send_every_s=0.2)
    orphan.watch(provider)  # a server that outlives its agent (break 09) shows it in the trace
    return provider


if __name__ == "__main__":
    main()
