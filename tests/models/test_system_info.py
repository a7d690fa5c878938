"""The lines CI prints before the suite: which CPU, what llama.cpp was built for, where the weights landed."""

from __future__ import annotations

import pytest

from miniagent.models import system_info
from miniagent.models.llama_params import choose_amx, cpu_model_name
from miniagent.models.llama_runtime import load_weights
from miniagent.processes import machine_cores


@pytest.mark.real_model
def test_the_system_lines_name_the_cpu_llamas_build_and_the_weights_buffers(capfd):
    assert system_info.main() == 0
    out, err = capfd.readouterr()
    assert err == "", "llama.cpp's log reached stderr"
    cpu, llama, weights = out.splitlines()
    assert cpu == f"CPU: {cpu_model_name()}, {machine_cores()} cores; {choose_amx().describe()}"
    assert llama.startswith("llama.cpp (llama-cpp-python ") and "): CPU : " in llama and not llama.endswith("|")
    loaded = load_weights()
    try:
        assert weights == "weights: " + ", ".join(f"{name} {mib:.2f} MiB" for name, mib in loaded.buffers.items())
    finally:
        loaded.model.close()
