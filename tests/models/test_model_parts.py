"""Small parts of the model backends that a learner reads the output of: the start-up line, llama.cpp's captured
load log, and the token counts a model server reports."""

from __future__ import annotations

import ctypes
import gc
import sys

import pytest

from miniagent.models.llama_params import AmxChoice, LlamaLog, model_params, weight_buffers
from miniagent.models.llama_runtime import LLAMA_LOG, KVRuntime
from miniagent.models.openai_compat import _count


def runtime(n_threads: int, buffers: dict[str, float]) -> KVRuntime:
    """A runtime with only what its start-up line reads (no model loaded)."""
    rt = KVRuntime.__new__(KVRuntime)
    rt.n_threads, rt.weight_buffers, rt.amx = n_threads, buffers, AmxChoice(False, "no AMX on this CPU")
    return rt


def test_the_startup_line_names_the_threads_and_why_the_amx_choice_and_each_weight_buffer():
    rt = runtime(2, {"CPU": 230.6, "CPU_REPACK": 12.4})
    assert rt.startup_line("auto: usable CPUs 2, busy with other programs 0.1") == (
        "llama.cpp threads: 2 (auto: usable CPUs 2, busy with other programs 0.1), "
        "AMX path: off (no AMX on this CPU), weights in CPU 231 MiB, CPU_REPACK 12 MiB")
    assert runtime(3, {}).startup_line() == \
        "llama.cpp threads: 3, AMX path: off (no AMX on this CPU), weights in unknown"


@pytest.mark.parametrize("value, counted", [(7, 7), (0, 0), (-1, 0), ("12", 0), (None, 0), (3.0, 0)])
def test_a_servers_token_count_is_taken_only_when_it_is_a_count(value, counted):
    assert _count(value) == counted


@pytest.mark.real_model
def test_llama_log_keeps_the_load_log_only_while_capturing_and_never_fails_outside(monkeypatch):
    """A fresh LlamaLog (the lab's own is made at import) takes llama.cpp's log over; the lab's is put back."""
    from llama_cpp import _internals as internals

    from miniagent.models.llama_runtime import default_model_path

    def load():
        return internals.LlamaModel(path_model=default_model_path(), params=model_params(AmxChoice(False, "test")),
                                    verbose=False)

    failed = []  # an exception in a C callback is not raised: Python hands it to sys.unraisablehook
    monkeypatch.setattr(sys, "unraisablehook", failed.append)
    log = LlamaLog()
    try:
        gc.collect()  # the C side holds only a pointer to the callback: it must survive a collection
        load().close()  # logs with nobody capturing yet: kept nowhere, and no error
        with log.capture() as lines:
            model = load()
        assert lines and log.lines is None
        assert sum(weight_buffers(lines).values()) > 100  # the weights' buffer lines, in MiB (~235 for Gemma 3 270M)
        model.close()
    finally:
        import llama_cpp

        llama_cpp.llama_log_set(LLAMA_LOG._callback, ctypes.c_void_p(0))
    assert [f.exc_value for f in failed] == []
