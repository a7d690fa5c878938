"""What llama.cpp is asked to load: the model's and the context's parameters, and whether the AMX path is on.

The AMX path is llama.cpp's extra buffer types (the AMX buffer, and weight repacking on other CPUs); its AMX
kernel crashes with this model (:data:`UPSTREAM_REPORT`).  ``auto`` leaves them out only where the CPU
reports AMX; ``on`` and ``off`` force the choice.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path

from .settings import AMX_CHOICES, check_choice

# With this model llama.cpp dies of SIGSEGV in ggml_backend_amx_mul_mat before the first turn (open upstream).
UPSTREAM_REPORT = "ggml-org/llama.cpp#20824"
CPUINFO = Path("/proc/cpuinfo")


def cpu_reports_amx(cpuinfo: Path | None = None) -> bool | None:
    """True when the CPU's flags include AMX tiles; None where there is no /proc/cpuinfo to read."""
    try:
        text = (cpuinfo or CPUINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            flags.update(value.split())
    return bool(flags & {"amx_tile", "amx_int8", "amx_bf16"})


def cpu_model_name(cpuinfo: Path | None = None) -> str:
    """The CPU's model name as /proc/cpuinfo gives it ("unknown" elsewhere)."""
    try:
        text = (cpuinfo or CPUINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name":
            return value.strip()
    return "unknown"


@dataclass(frozen=True)
class AmxChoice:
    """Whether llama.cpp may use its extra buffer types (the AMX path, weight repacking), and why."""

    enabled: bool
    reason: str

    def describe(self) -> str:
        return f"AMX path: {'on' if self.enabled else 'off'} ({self.reason})"


def choose_amx(setting: str = "auto", cpuinfo: Path | None = None) -> AmxChoice:
    check_choice("llama_amx", setting, AMX_CHOICES)
    if setting == "on":
        return AmxChoice(True, "forced by llama_amx = on")
    if setting == "off":
        return AmxChoice(False, "forced by llama_amx = off")
    # Off only where AMX is: repacking (27 tensors, 12.7 of 248 MiB) left prefill and decode speed unchanged
    # (measured in lab 02), so other CPUs keep it.
    if cpu_reports_amx(cpuinfo):
        return AmxChoice(False, f"auto: this CPU reports AMX, and llama.cpp's AMX kernel crashes, {UPSTREAM_REPORT}")
    return AmxChoice(True, "auto: no AMX on this CPU, nothing to leave out")


def model_params(amx: AmxChoice):
    """llama.cpp's model parameters as ``llama_cpp.Llama`` sets them on the CPU, with the AMX choice applied."""
    import llama_cpp

    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP
    params.use_extra_bufts = amx.enabled  # false leaves out the AMX buffer, and the repacking with it
    return params


def vocab_only_params():
    """Model parameters that read the tokenizer alone (the openai backend tokenizes as the server does)."""
    import llama_cpp

    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    params.vocab_only = True
    return params


def context_params(*, n_ctx: int, n_batch: int, n_seq_max: int, n_threads: int):
    """llama.cpp's context parameters as ``llama_cpp.Llama`` sets them (the same logits to the last bit)."""
    import llama_cpp

    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
    params.n_seq_max, params.kv_unified = n_seq_max, True
    params.n_threads = params.n_threads_batch = n_threads
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.yarn_attn_factor, params.yarn_beta_fast, params.yarn_beta_slow = 1.0, 32.0, 1.0
    params.no_perf = False
    return params


# --- what llama.cpp says while it loads ---------------------------------------------------------------
_BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")


def weight_buffers(log_lines: list[str]) -> dict[str, float]:
    """{buffer type: MiB} of the model's weights, read from llama.cpp's own load log."""
    found: dict[str, float] = {}
    for line in log_lines:
        match = _BUFFER.search(line)
        if match:
            found[match.group(1)] = found.get(match.group(1), 0.0) + float(match.group(2))
    return found


class LlamaLog:
    """llama.cpp's C log: silent, except what is kept while :meth:`capture` is on (the load's buffer lines)."""

    def __init__(self) -> None:
        import llama_cpp

        self.lines: list[str] | None = None

        @llama_cpp.llama_log_callback
        def _callback(level, text, user_data):  # noqa: ARG001 - signature fixed by the C API
            if self.lines is not None:
                self.lines.append(text.decode("utf-8", errors="replace"))

        self._callback = _callback  # keep a reference: C holds only the pointer
        llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))

    def capture(self) -> "_Capture":
        return _Capture(self)


class _Capture:
    def __init__(self, log: LlamaLog) -> None:
        self.log = log
        self.lines: list[str] = []

    def __enter__(self) -> list[str]:
        self.log.lines = self.lines
        return self.lines

    def __exit__(self, *exc) -> None:
        self.log.lines = None
