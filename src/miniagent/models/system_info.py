"""Which CPU this is and what llama.cpp does on it, in three lines: ``python -m miniagent.models.system_info``.

CI prints them before the suite, so that a failure in its log can be matched to the CPU it ran on: the
instruction sets llama.cpp was built for, the AMX choice, and the buffers the weights landed in (one mapped
buffer, or some repacked beside it for AVX-512 or AMX kernels) differ from one machine to the next.
"""

from __future__ import annotations

import sys

from ..processes import machine_cores


def system_lines() -> list[str]:
    """The CPU, llama.cpp's own system line, and where the packaged model's weights landed on this machine."""
    import llama_cpp

    from .llama_params import choose_amx, cpu_model_name
    from .llama_runtime import load_weights

    system = llama_cpp.llama_print_system_info().decode(errors="replace").strip().rstrip("|").strip()
    weights = load_weights(amx=choose_amx())
    try:
        buffers = ", ".join(f"{name} {mib:.2f} MiB" for name, mib in weights.buffers.items()) or "unknown"
    finally:
        weights.model.close()
    return [f"CPU: {cpu_model_name()}, {machine_cores()} cores; {weights.amx.describe()}",
            f"llama.cpp (llama-cpp-python {llama_cpp.__version__}): {system}",
            f"weights: {buffers}"]


def main() -> int:
    print("\n".join(system_lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
