"""Model backends. Each one turns a scratchpad into the next action's JSON text.

``llama`` (default) runs a GGUF model in-process, ``openai`` talks to any
OpenAI-compatible server, ``scripted:<behaviour>`` is a deterministic
stand-in for fast tests and exact demos.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from ..agent.ports import Backend
from ..processes import busy_elsewhere, usable_cores
from .settings import ModelSettings

log = logging.getLogger("miniagent")


def threads_for(settings: ModelSettings) -> tuple[int, str] | None:
    """``(threads, why)`` for the backend ``settings`` names, measured now; None where it runs no model here.

    Measured before anything else of the run starts: the measurement counts the CPU that other programs
    use over a quarter of a second (a tenth on an idle machine), and our own start-up (the MCP server importing its SDK) running at the
    same time would crowd them out of the cores and hide them.
    """
    return choose_threads(settings.n_threads) if settings.llm.partition(":")[0] == "llama" else None


def start_loading(settings: ModelSettings) -> Future | None:
    """Start loading the model file in a thread now; None where the backend ``settings`` names loads none here.

    llama.cpp's load (half a second for the default model) is C code that releases the GIL, so it overlaps
    the thread measurement and the MCP server's start. Our own CPU does not mislead the measurement: it
    counts other programs' use, ours subtracted. A daemon thread: an interrupted start-up does not wait for it.
    """
    if settings.llm.partition(":")[0] != "llama":
        return None
    loaded: Future = Future()

    def load() -> None:
        try:
            from .llama_params import choose_amx
            from .llama_runtime import load_weights

            loaded.set_result(load_weights(settings.model or None, choose_amx(settings.llama_amx)))
        except BaseException as err:  # handed to whoever waits for the weights
            loaded.set_exception(err)

    threading.Thread(target=load, name="miniagent-model-load", daemon=True).start()
    return loaded


def make_backend(settings: ModelSettings, threads: tuple[int, str] | None = None, weights=None) -> Backend:
    """Build the backend the settings name (``llm``); ``threads`` as :func:`threads_for` measured it, ``weights``
    as :func:`start_loading` loaded them (llama; loaded here when None)."""
    kind, _, detail = settings.llm.partition(":")
    if kind == "llama":
        from .llama import LlamaBackend
        from .llama_params import choose_amx

        n_threads, why = threads or choose_threads(settings.n_threads)
        backend = LlamaBackend(model_path=settings.model or None, n_ctx=settings.n_ctx,
                               n_threads=n_threads, max_action_tokens=settings.max_action_tokens,
                               decode=settings.decode, cache_dir=settings.cache_dir or None,
                               amx=None if weights else choose_amx(settings.llama_amx), weights=weights)
        log.info("%s", backend.rt.startup_line(why))  # one line: threads, the AMX path, where the weights went
        return backend
    if kind == "openai":
        from .openai_compat import OpenAIBackend

        return OpenAIBackend(base_url=settings.openai_base_url, model=settings.openai_model,
                             max_action_tokens=settings.max_action_tokens, decode=settings.decode,
                             response_format=settings.openai_response_format, model_path=settings.model or None,
                             n_ctx=settings.n_ctx, cache_dir=settings.cache_dir or None,
                             max_retries=settings.openai_max_retries, warm_up=True,
                             startup_s=settings.openai_startup_s)
    if kind == "scripted":
        from .scripted import ScriptedBackend

        return ScriptedBackend(detail or "oracle")
    raise ValueError(f"unknown llm {settings.llm!r}: use llama, openai or scripted:<behaviour>")


# --------------------------------------------------------------------------
# How many threads llama.cpp gets
# --------------------------------------------------------------------------
# llama.cpp's threads meet at a barrier after every layer.  When one of them
# has no core of its own (another program holds it), every other thread waits
# for it, and a decode that takes 0.8 s on an idle 2-core machine took 7.6 s
# with 2 threads and one core busy, 2.1 s with 1 thread.  So "auto" counts the
# cores that are free now, not the cores the machine has.


def resolve_threads(requested: int) -> int:
    """``requested`` if positive; for 0 (auto), the usable CPUs that other programs leave free now, at least 1."""
    return choose_threads(requested)[0]


def choose_threads(requested: int) -> tuple[int, str]:
    """(threads, why) for :func:`resolve_threads`; ``why`` is empty for a count given as such."""
    if requested > 0:
        return requested, ""
    cpus = usable_cores()
    others = busy_elsewhere() if cpus > 1 else 0.0
    # A core counts as free when other programs use less than half of one.
    free = cpus if others is None else int(cpus - others + 0.5)
    n_threads = max(1, min(cpus, free))
    shown = "unknown" if others is None else f"{others:.1f}"
    return n_threads, f"auto: usable CPUs {cpus}, busy with other programs {shown}"
