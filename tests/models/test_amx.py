"""llama.cpp's AMX path: left out where the CPU reports AMX (its kernel crashes with this model), kept elsewhere.

The machines these tests run on may or may not have AMX; a stand-in /proc/cpuinfo decides what the
lab *believes*, and llama.cpp's own load log says what it *did* (which buffer types hold the weights).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from miniagent import models
from miniagent.agent.config import ConfigError
from miniagent.settings import load_config
from miniagent.models import llama_params
from miniagent.models.llama_params import (AmxChoice, choose_amx, context_params, cpu_model_name, cpu_reports_amx,
                                           model_params, vocab_only_params, weight_buffers)

ROOT = Path(__file__).resolve().parents[2]
# The flags line of a Sapphire Rapids Xeon (shortened) and of a CPU without AMX.
AMX_FLAGS = "fpu vme sse sse2 avx avx2 avx512f avx512_vnni amx_bf16 avx512_fp16 amx_tile amx_int8"
PLAIN_FLAGS = "fpu vme sse sse2 avx avx2 avx512f avx512_vnni"
EXTRA_BUFFERS = {"CPU_REPACK", "AMX"}  # llama.cpp's extra buffer types on x86


def cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    block = f"processor\t: {{n}}\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\n"
    path.write_text(block.format(n=0) + block.format(n=1))
    return path


def this_cpu_repacks() -> bool:
    """llama.cpp repacks this model's Q4_K weights on x86 CPUs with AVX2 (all the lab's x86 machines)."""
    return "avx2" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else False


def test_amx_is_read_from_the_cpu_flags(tmp_path):
    assert cpu_reports_amx(cpuinfo(tmp_path, AMX_FLAGS)) is True
    assert cpu_reports_amx(cpuinfo(tmp_path, PLAIN_FLAGS)) is False
    assert cpu_reports_amx(tmp_path / "missing") is None  # not Linux: nothing to read


@pytest.mark.parametrize("flag", ["amx_tile", "amx_int8", "amx_bf16"])
def test_any_one_amx_flag_is_amx_and_a_damaged_cpuinfo_is_still_read(tmp_path, flag):
    path = tmp_path / "cpuinfo"
    path.write_bytes(b"processor\t: 0\nmodel name\t: Xeon \xff\xfe(R)\nflags\t\t: fpu " + flag.encode() + b" sse\n")
    assert cpu_reports_amx(path) is True
    assert cpu_model_name(path) == "Xeon \ufffd\ufffd(R)"


def test_the_cpu_model_name_is_read_or_unknown(tmp_path):
    assert cpu_model_name(cpuinfo(tmp_path, PLAIN_FLAGS)) == "Some CPU"
    (tmp_path / "bare").write_text("processor\t: 0\nflags\t\t: fpu\n")
    assert cpu_model_name(tmp_path / "bare") == "unknown" and cpu_model_name(tmp_path / "missing") == "unknown"
    (tmp_path / "colon").write_text("model name\t: Virtual CPU: 2 GHz\n")  # only the first colon splits
    assert cpu_model_name(tmp_path / "colon") == "Virtual CPU: 2 GHz"


def test_the_default_choice_is_auto_and_says_why(tmp_path):
    assert choose_amx(cpuinfo=cpuinfo(tmp_path, PLAIN_FLAGS)) == \
        AmxChoice(True, "auto: no AMX on this CPU, nothing to leave out")


def test_llama_cpp_is_asked_for_what_llama_cpp_python_asks_for_on_the_cpu():
    """The parameters as ``llama_cpp.Llama`` sets them (the same logits to the last bit), the AMX choice applied."""
    import llama_cpp

    model = model_params(AmxChoice(False, "test"))
    assert (model.n_gpu_layers, model.load_mode, model.use_extra_bufts) == (0, llama_cpp.LLAMA_LOAD_MODE_MMAP, False)
    assert model_params(AmxChoice(True, "test")).use_extra_bufts is True
    vocab = vocab_only_params()
    assert (vocab.n_gpu_layers, vocab.vocab_only) == (0, True)
    ctx = context_params(n_ctx=2048, n_batch=512, n_seq_max=3, n_threads=2)
    assert (ctx.n_ctx, ctx.n_batch, ctx.n_ubatch, ctx.n_seq_max, ctx.kv_unified) == (2048, 512, 512, 3, True)
    assert (ctx.n_threads, ctx.n_threads_batch, ctx.flash_attn_type) == (2, 2, llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    assert (ctx.yarn_attn_factor, ctx.yarn_beta_fast, ctx.yarn_beta_slow, ctx.no_perf) == (1.0, 32.0, 1.0, False)


@pytest.mark.parametrize("setting,flags,enabled", [
    ("auto", AMX_FLAGS, False),   # the crash: left out
    ("auto", PLAIN_FLAGS, True),  # nothing to leave out: repacking stays
    ("on", AMX_FLAGS, True),      # forced
    ("off", PLAIN_FLAGS, False),  # forced
])
def test_the_choice_follows_the_setting_and_the_cpu(tmp_path, setting, flags, enabled):
    choice = choose_amx(setting, cpuinfo(tmp_path, flags))
    assert choice.enabled is enabled
    assert choice.describe().startswith(f"AMX path: {'on' if enabled else 'off'} (")
    if setting == "auto" and not enabled:
        assert "ggml-org/llama.cpp#20824" in choice.describe()  # the reason names the upstream report


def test_a_bad_setting_is_refused_by_every_layer(tmp_path):
    with pytest.raises(ValueError, match="llama_amx"):
        choose_amx("sometimes")
    with pytest.raises(ConfigError, match="llama_amx"):
        load_config(env={"MINIAGENT_LLAMA_AMX": "sometimes"})


def test_the_setting_reaches_the_backend_from_every_layer(tmp_path, monkeypatch):
    seen = []

    class Backend:
        def __init__(self, **kwargs):
            seen.append(kwargs["amx"])
            self.rt = self

        def startup_line(self, why=""):
            return ""

    monkeypatch.setattr("miniagent.models.llama.LlamaBackend", Backend)
    monkeypatch.setattr(llama_params, "CPUINFO", cpuinfo(tmp_path, AMX_FLAGS))
    file = tmp_path / "miniagent.toml"
    file.write_text('llama_amx = "on"\n')
    layers = [({}, {}, None, False),                                  # default: auto, and this "CPU" has AMX
              ({}, {}, file, True),                                   # file
              ({}, {"MINIAGENT_LLAMA_AMX": "off"}, file, False),      # env over file
              ({"llama_amx": "on"}, {"MINIAGENT_LLAMA_AMX": "off"}, file, True)]  # flag over env
    for cli, env, path, enabled in layers:
        models.make_backend(load_config(cli=cli, env=env, path=path).model)
        assert seen[-1].enabled is enabled, (cli, env, path)


@pytest.mark.real_model
def test_the_model_loads_without_the_amx_path_where_the_cpu_reports_amx(tmp_path, monkeypatch):
    """auto on an AMX machine: llama.cpp is given no extra buffer type, and its load log shows none used."""
    from miniagent.models.llama_runtime import KVRuntime

    stand_in = cpuinfo(tmp_path, AMX_FLAGS)
    rt = KVRuntime(amx=choose_amx("auto", stand_in))
    try:
        assert rt.amx == AmxChoice(False, rt.amx.reason) and "this CPU reports AMX" in rt.amx.reason
        assert rt.weight_buffers and not set(rt.weight_buffers) & EXTRA_BUFFERS, rt.weight_buffers
        assert rt.vocab.tokenize("she went") and rt.sync(rt.vocab.tokenize("She went home", bos=True)).shape == (rt.n_vocab,)
    finally:
        rt.close()


@pytest.mark.real_model
def test_forced_on_the_model_keeps_llamas_extra_buffers(tmp_path):
    """on: the extra buffer types are offered; on an x86 CPU with AVX2 llama.cpp takes one (repacking, or AMX).

    Only the load: on an AMX machine a decode with the AMX path on is the crash this setting exists for."""
    from miniagent.models.llama_runtime import KVRuntime

    rt = KVRuntime(amx=choose_amx("on", cpuinfo(tmp_path, AMX_FLAGS)))
    try:
        assert rt.amx.enabled and rt.amx.reason == "forced by llama_amx = on"
        if this_cpu_repacks():
            assert set(rt.weight_buffers) & EXTRA_BUFFERS, rt.weight_buffers
    finally:
        rt.close()


def test_the_weight_buffers_come_from_llamas_load_log():
    log = ["load_tensors:   CPU_Mapped model buffer size =   235.16 MiB\n", "unrelated\n",
           "load_tensors:   CPU_REPACK model buffer size =    12.66 MiB\n",
           "load_tensors:   CPU_Mapped model buffer size =     1.00 MiB\n"]  # a second part of the same type
    assert weight_buffers(log) == {"CPU_Mapped": 236.16, "CPU_REPACK": 12.66}


@pytest.mark.real_model
def test_ask_prints_the_startup_line_with_the_choice_and_the_buffers():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    proc = subprocess.run([sys.executable, "-m", "miniagent", "ask", "What is the past simple of go for she?",
                           "--llama-amx", "off", "--cache-dir", ""], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("[miniagent] llama.cpp threads: ")]
    assert "AMX path: off (forced by llama_amx = off)" in line and "weights in CPU_Mapped" in line, line
    assert not any(name in line.split("weights in ")[1] for name in EXTRA_BUFFERS), line
    assert proc.stdout.strip() == "she went"


@pytest.mark.real_model
@pytest.mark.skipif(not cpu_reports_amx(), reason="this CPU does not report AMX: the stand-in tests above cover auto here")
def test_on_a_cpu_that_reports_amx_the_default_leaves_the_amx_path_out_and_answers():
    """The real thing, where the machine has it: with every setting at its default, this CPU's llama.cpp gets no
    extra buffer type and the tutor answers (with the AMX path on, the same question died of SIGSEGV in its
    first decode here: docs/labs/02-mcp-server.md, step 7)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    proc = subprocess.run([sys.executable, "-m", "miniagent", "ask", "What is the past simple of go for she?"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("[miniagent] llama.cpp threads: ")]
    assert "AMX path: off (auto: this CPU reports AMX" in line, line
    assert not any(name in line.split("weights in ")[1] for name in EXTRA_BUFFERS), line
    assert proc.stdout.strip() == "she went"


def test_the_model_servers_take_the_setting_from_every_layer(tmp_path):
    """Both servers a teacher can start (the lab's and llama-cpp-python's) choose with ``amx_from_layers``."""
    from miniagent.serving.llama_cpp_server import amx_from_layers

    amx_cpu, file, empty = cpuinfo(tmp_path, AMX_FLAGS), tmp_path / "miniagent.toml", tmp_path / "empty.toml"
    file.write_text('llama_amx = "on"\nmodel = "elsewhere.gguf"\n')  # the file's other settings are not its business
    empty.write_text("")
    assert amx_from_layers(None, env={}, path=empty, cpuinfo=amx_cpu).enabled is False  # auto
    # auto reads the CPU it is given, not this machine's: on any machine, a CPU without AMX keeps the path
    (tmp_path / "plain").mkdir()
    plain_cpu = cpuinfo(tmp_path / "plain", PLAIN_FLAGS)
    assert amx_from_layers(None, env={}, path=empty, cpuinfo=plain_cpu).enabled is True
    assert amx_from_layers(None, env={}, path=file, cpuinfo=amx_cpu).enabled is True
    assert amx_from_layers(None, env={"MINIAGENT_LLAMA_AMX": "off"}, path=file, cpuinfo=amx_cpu).enabled is False
    assert amx_from_layers("on", env={"MINIAGENT_LLAMA_AMX": "off"}, path=file, cpuinfo=amx_cpu).enabled is True
    with pytest.raises(ConfigError, match="llama_amx"):
        amx_from_layers(None, env={"MINIAGENT_LLAMA_AMX": "sometimes"}, path=file)


@pytest.mark.real_model
@pytest.mark.parametrize("kind, line", [
    ("llama-cpp-python", "[miniagent] model server: AMX path: off (forced by llama_amx = off)"),
    ("miniagent", "AMX path: off (forced by llama_amx = off); http://127.0.0.1:"),
])
def test_a_class_server_takes_the_same_choice(tmp_path, kind, line):
    """A teacher's server, either of the two, loads the model with the lab's AMX choice and says so."""
    pytest.importorskip("uvicorn")
    from miniagent.serving.start import model_server

    log = tmp_path / "server.log"
    with model_server(kind, log=log, extra_args=("--llama-amx", "off")):
        pass
    text = log.read_text()
    assert line in text, text
    if kind == "llama-cpp-python":  # llama.cpp's own load log (the lab's server keeps it, as the local backend)
        assert "model buffer size" in text and not any(f"{name} model buffer" in text for name in EXTRA_BUFFERS), text


def test_every_ci_log_names_its_cpu_and_whether_it_has_amx():
    ci = (ROOT / ".ci" / "run").read_text()
    named = ci.index('echo "CI machine: ')
    assert "amx_tile" in ci[:named] and named < ci.index("pip install")  # said before anything can crash
    line = subprocess.run(["bash", "-c", ci[ci.index("cpu=$("):ci.index("\n", named)]], capture_output=True,
                          text=True, check=True).stdout
    assert line.startswith("CI machine: ") and "AMX: " in line and " cores, " in line


def test_every_ci_log_prints_llamas_system_lines_after_the_install():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("pip install -q -e") < ci.index("python -m miniagent.models.system_info") < ci.index("invoke test")


@pytest.mark.parametrize("suite, breaks, status", [(0, 0, 0), (1, 0, 1), (0, 1, 1), (2, 1, 2), (1, 2, 1)])
def test_ci_checks_every_break_on_the_real_model_after_the_suite_and_fails_on_either(tmp_path, suite, breaks,
                                                                                      status):
    """The suite's status first; the real-model break check runs even after a red suite (one log tells both)."""
    ci = (ROOT / ".ci" / "run").read_text()
    tail = ci[ci.index("status=0\n"):]
    assert ".venv/bin/invoke test " in tail and ".venv/bin/invoke check-breaks --real " in tail
    calls = tmp_path / "calls"
    stub = (f'invoke() {{ echo "$*" >> {calls}; case "$1" in test) return {suite};; check-breaks) return {breaks};; '
            f'esac; return 99; }}\n')
    proc = subprocess.run(["bash", "-c", stub + tail.replace(".venv/bin/invoke", "invoke")], capture_output=True,
                          text=True)
    assert proc.returncode == status, proc.stderr
    assert calls.read_text().splitlines() == ["test", "check-breaks --real --lines"]
