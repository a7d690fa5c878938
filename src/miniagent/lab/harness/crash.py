"""A run that died of a signal: named as such, never taken for a slow or busy machine.

A negative return code (``-11``: SIGSEGV) that nobody in the lab sent means the agent crashed.  The report, in
English or Spanish, names the signal, how far the loop got, the agent's last stderr lines and the next step.
"""

from __future__ import annotations

import signal

from ..words import section

LAB_02 = "docs/labs/02-mcp-server.md"
STDERR_SHOWN = 6  # lines of the agent's stderr a crash report quotes

# One text for the harness's report, the notebook, the tour, the maintainer check and `invoke`; it never blames
# the machine for a crash: running it again on a quieter one will not help.
TEXT = section("crash")
WHAT = section("crash_what")  # what each deadly signal means, by language


def signal_name(returncode: int | None) -> str | None:
    """``SIGSEGV`` for -11; None for an exit code that is not a death by signal."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def signal_number(name: str) -> int | None:
    try:
        return int(signal.Signals[name])
    except KeyError:
        return None


MODEL_FRAMES = ("llama_cpp", "llama.cpp", "ggml", "miniagent/models/llama")


def in_llama_cpp(stderr_lines: list[str]) -> bool:
    """The agent's stderr shows the local model at work when it died (Python's faulthandler names the frames:
    llama-cpp-python's, or the lab's llama backend that calls into it)."""
    return any(frame in line for line in stderr_lines for frame in MODEL_FRAMES)


FRAMES_SHOWN = 5  # frames of the thread that died


def fatal_error(stderr_lines: list[str]) -> list[str]:
    """What Python's faulthandler wrote when the process died: the error and the frames of the thread that
    died (the current thread; when a C thread of llama.cpp's died, the Python thread that was in the model).
    Empty when there is no such report (the MCP server's own lines may follow it on the same stderr)."""
    start = next((i for i, line in enumerate(stderr_lines) if line.startswith("Fatal Python error:")), None)
    if start is None:
        return []
    blocks: list[list[str]] = []
    for line in stderr_lines[start + 1:]:
        if line.startswith(("Thread 0x", "Current thread 0x")):
            blocks.append([line])
        elif line.startswith("  ") and blocks:  # a frame, "  ..." (a stack over 100 frames), "  <no Python frame>"
            blocks[-1].append(line)
        elif line.strip() and blocks:  # "Extension modules: ..." or anything after the report
            break
    died = next((b for b in blocks if b[0].startswith("Current thread")), None)
    if died is None or not in_llama_cpp(died):
        died = next((b for b in blocks if in_llama_cpp(b)), died)
    return [stderr_lines[start], *(died[:FRAMES_SHOWN + 1] if died else [])]


def describe(sig: str, *, loop_started: bool | None, turns: int, stderr_lines: list[str],
             lang: str = "en", who: str = "agent") -> list[str]:
    """The crash report: what killed the agent and when (None: not known), where (faulthandler's report, else
    its last lines on stderr), and the next step."""
    lang = _spoken(lang)  # for both tables: the words and what each signal means
    t = TEXT[lang]
    num = signal_number(sig)
    when = "" if loop_started is None else t["after"].format(turns=turns) if loop_started else t["before"]
    lines = [t["died"].format(who=t["who"][who], sig=sig, num=num if num is not None else "?",
                              what=WHAT[lang].get(sig, ""), when=when)]
    fatal = fatal_error(stderr_lines)
    shown = fatal or [line for line in stderr_lines if line.strip()][-STDERR_SHOWN:]
    lines += [t["where" if fatal else "stderr"], *(f"    {line.strip()}" for line in shown)] if shown \
        else [t["silent"]]
    lines.append(t["llama" if in_llama_cpp(fatal or stderr_lines) else "other"].format(lab=LAB_02))
    return lines


def short(sig: str, lang: str = "en") -> str:
    return TEXT[_spoken(lang)]["short"].format(sig=sig)


def _spoken(lang: str) -> str:
    """The report's language, English for one the lab does not speak: a crash report never fails itself."""
    return lang if lang in TEXT else "en"
