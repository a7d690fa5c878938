"""Command line: ``python -m miniagent ask QUESTION`` and ``python -m miniagent eval``.

Every setting of every wing (``miniagent.settings``) is a flag (``max_turns`` -> ``--max-turns``); a flag
left out means "use the lower layers" (config file, env vars, defaults).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import sys

from .agent.errors import OutOfGrammar, ServerFailed
from .agent.loop import calls_summary
from .settings import ConfigError, Settings, load_config, setting_fields


# ask's exit status: 0 answered, 3 declined as outside the grammar, 1 any other stop (2: bad settings or input).
EXIT_STATUS = {"answered": 0, OutOfGrammar.stop_reason: 3}


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("settings (override config file and MINIAGENT_* env vars)")
    kinds = {"int": int, "float": float, "str": str, "bool": str}  # a bool is checked by the config layer
    for f in setting_fields():
        group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=kinds[str(f.type)], default=None,
                           help=f"default: {f.default!r}",
                           **({"metavar": "true|false"} if str(f.type) == "bool" else {}))
    parser.add_argument("--config", default=None, help="path of a TOML config file (default: ./miniagent.toml)")
    parser.add_argument("--trace", default=None, help="write JSON-lines events to FILE ('-' for stdout)")


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:  # 0 would read every item, -1 all but the last (a slice)
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _config_from(args: argparse.Namespace) -> Settings:
    cli = {f.name: getattr(args, f.name) for f in setting_fields()}
    return load_config(cli=cli, path=args.config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="miniagent", description="A guarded ReAct grammar tutor.")
    sub = parser.add_subparsers(dest="command", required=True)
    ask = sub.add_parser("ask", help="ask the tutor one question")
    ask.add_argument("question", help="the question, in quotes (at most max_input_chars characters)")
    ask.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    _add_config_flags(ask)
    ev = sub.add_parser("eval", help="score the tutor on an eval set")
    ev.add_argument("--set", dest="eval_set", default=None, help="JSON-lines file of {question, accept: [whole answers]}")
    ev.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ev.add_argument("--limit", type=_at_least_one, default=None, help="only the first N items (1 or more)")
    _add_config_flags(ev)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .processes import install_sigterm_handler

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[miniagent] %(message)s", stream=sys.stderr)
    install_sigterm_handler()  # SIGTERM unwinds like Ctrl-C, so the MCP server is always closed
    try:
        config = _config_from(args)
    except ConfigError as err:
        print(f"miniagent: bad setting: {err}", file=sys.stderr)
        return 2
    # A crash in C (llama.cpp) kills the process with no Python traceback: faulthandler writes the Python
    # frames it died in to stderr first, and the harness and `invoke` quote them in the crash report.
    faulthandler.enable()
    try:
        if args.command == "ask":
            return _ask(args, config)
        from .lab.evaluation import run_eval_cli

        return run_eval_cli(args, config)
    except (OSError, ValueError) as err:  # a bad --model path or --llm name, a --trace that cannot be written
        print(f"miniagent: {err}", file=sys.stderr)
        return 2
    except ServerFailed as err:  # the conjugation server did not start (a run's own server failures are typed)
        print(f"miniagent: {err}\nNext: check that `python -m miniagent.tools.server` starts.", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before the loop started (inside it, the loop reports "cancelled")
        print("miniagent: cancelled", file=sys.stderr)
        return 130


def _ask(args: argparse.Namespace, config: Settings) -> int:
    from .lab.session import TutorSession
    from .agent.trace import Trace

    trace = Trace.to_path(args.trace) if args.trace else Trace.memory()
    try:
        with TutorSession(config, trace) as session:
            outcome = session.ask(args.question)
    finally:
        trace.close()
    if args.json:
        print(json.dumps({"answer": outcome.answer, "stop_reason": outcome.stop_reason,
                          "final_answer": outcome.final_answer, "stats": outcome.stats.as_dict()}, ensure_ascii=False))
    else:
        # With the trace on stdout, stdout stays JSON lines (`| jq` reads it): the answer goes with the summary.
        print(outcome.answer, file=sys.stderr if args.trace == "-" else sys.stdout)
        s = outcome.stats
        calls = calls_summary(s.tool_calls, none="none")
        print(f"-- stop_reason: {outcome.stop_reason} | turns: {s.turns} | tool calls: {calls} | "
              f"{s.seconds:.2f} s", file=sys.stderr)
    return EXIT_STATUS.get(outcome.stop_reason, 1)


if __name__ == "__main__":
    sys.exit(main())
