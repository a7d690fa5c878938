"""llama-cpp-python's OpenAI-compatible server, with the lab's choice of llama.cpp's AMX path.

    python -m miniagent.serving.llama_cpp_server [--llama-amx auto|on|off] --model PATH [llama_cpp.server options]

Everything but ``--llama-amx`` goes to ``python -m llama_cpp.server`` unchanged.  The setting comes from
the same layers as the tutor's (defaults, ``miniagent.toml``, ``MINIAGENT_LLAMA_AMX``, the flag):
``auto`` leaves llama.cpp's extra buffer types out where the CPU reports AMX, whose kernel crashes
with this model (:mod:`miniagent.models.llama_params`).
"""

from __future__ import annotations

import argparse
import sys

from ..agent.config import ConfigError, layered
from ..models.llama_params import AmxChoice, choose_amx
from ..models.settings import AMX_CHOICES, ModelSettings, check


def build_parser() -> argparse.ArgumentParser:
    """llama_cpp.server's own options, and the lab's --llama-amx."""
    from llama_cpp.server.cli import add_args_from_model
    from llama_cpp.server.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m miniagent.serving.llama_cpp_server",
                                     description="llama-cpp-python's server, with the lab's AMX choice.")
    parser.add_argument("--llama-amx", choices=AMX_CHOICES, default=None,
                        help="llama.cpp's AMX path: auto (off where the CPU reports AMX), on or off "
                             "(default: miniagent.toml, MINIAGENT_LLAMA_AMX, else auto)")
    add_args_from_model(parser, Settings)
    parser.add_argument("--config_file", type=str, help="a llama_cpp.server config file")
    return parser


def amx_from_layers(flag: str | None, *, env=None, path=None, cpuinfo=None) -> AmxChoice:
    """The AMX choice a model server makes (this one and the lab's class server): ``llama_amx`` from the
    defaults, ``miniagent.toml``, ``MINIAGENT_LLAMA_AMX`` and ``--llama-amx`` (``flag``); ConfigError for a
    bad value."""
    settings = ModelSettings(**layered({"llama_amx": str}, cli={"llama_amx": flag}, env=env, path=path,
                                       whole_file=False))
    check(settings)
    return choose_amx(settings.llama_amx, cpuinfo)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    ours = build_parser().parse_args(args)  # every option checked (and --help) before anything loads
    for at, arg in enumerate(args):  # the rest is llama_cpp.server's
        if arg == "--llama-amx" or arg.startswith("--llama-amx="):
            del args[at:at + (2 if arg == "--llama-amx" else 1)]
            break
    try:
        choice = amx_from_layers(ours.llama_amx)
    except ConfigError as err:
        print(f"miniagent: bad setting: {err}", file=sys.stderr)
        return 2
    print(f"[miniagent] model server: {choice.describe()}", file=sys.stderr, flush=True)

    import llama_cpp.llama_cpp as lib

    # llama_cpp.Llama has no switch for the extra buffer types: the defaults it starts from change instead
    defaults = lib.llama_model_default_params

    def with_the_choice():
        params = defaults()
        params.use_extra_bufts = choice.enabled
        return params

    lib.llama_model_default_params = with_the_choice
    from llama_cpp.server.__main__ import main as serve

    sys.argv = ["python -m llama_cpp.server", *args]
    serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
