"""The agent's command line as a learner types it: ``python -m miniagent ask|eval ...``.

The end-to-end tests run these commands in subprocesses, where mutation testing cannot see them; these
parse them in the test process (found by ``invoke mutants --wing cli``)."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import miniagent
from miniagent.settings import setting_fields
from miniagent.cli import build_parser
from miniagent.processes import SIGNAL_CHECK_S, wait_result


def test_ask_reads_its_question_and_its_flags():
    args = build_parser().parse_args(["ask", "What is the past of go for she?", "--json", "--trace", "t.jsonl",
                                      "--config", "c.toml"])
    assert (args.command, args.question, args.json, args.trace, args.config) == \
        ("ask", "What is the past of go for she?", True, "t.jsonl", "c.toml")
    args = build_parser().parse_args(["ask", "q"])
    assert (args.command, args.json, args.trace, args.config) == ("ask", False, None, None)


def test_eval_reads_its_set_its_limit_and_json():
    args = build_parser().parse_args(["eval", "--set", "s.jsonl", "--limit", "3", "--json", "--trace", "-"])
    assert (args.command, args.eval_set, args.limit, args.json, args.trace) == ("eval", "s.jsonl", 3, True, "-")
    args = build_parser().parse_args(["eval"])
    assert (args.eval_set, args.limit, args.json, args.config) == (None, None, False, None)


@pytest.mark.parametrize("argv", [[], ["eval", "--limit", "three"], ["ask"], ["ask", "q", "--json", "yes"],
                                  ["ask", "q", "--max-turns", "three"]])
def test_a_command_line_it_cannot_read_is_refused_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("usage: miniagent ")


@pytest.mark.parametrize("limit, says", [("0", "must be 1 or more, got 0"), ("-1", "must be 1 or more, got -1"),
                                         ("three", "expected a whole number, got 'three'")])
def test_an_eval_limit_below_one_item_is_refused(limit, says, capsys):
    """--limit 0 scored every item and --limit -1 all but the last (a slice), both with status 0."""
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["eval", "--limit", limit])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.endswith(f"miniagent eval: error: argument --limit: {says}\n")
    assert build_parser().parse_args(["eval", "--limit", "1"]).limit == 1  # one item is a limit


@pytest.mark.parametrize("command", ["ask", "eval"])
def test_every_setting_is_a_flag_of_its_own_type_on_every_command(command):
    parser = build_parser()
    given = {"int": "7", "float": "0.5", "str": "x", "bool": "false"}
    for f in setting_fields():
        flag = "--" + f.name.replace("_", "-")
        args = parser.parse_args([command, *(["q"] if command == "ask" else []), flag, given[str(f.type)]])
        value = getattr(args, f.name)
        # a bool stays a word here: the config layer reads "true"/"false" the same from every layer
        assert value == {"int": 7, "float": 0.5, "str": "x", "bool": "false"}[str(f.type)], (flag, value)
        assert type(value) is {"int": int, "float": float, "str": str, "bool": str}[str(f.type)], flag
        assert all(getattr(args, g.name) is None for g in setting_fields() if g is not f), "a flag left out is None"


def _subcommands(parser: argparse.ArgumentParser) -> tuple[dict[str, argparse.ArgumentParser], dict[str, str]]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices), {a.dest: a.help for a in sub._choices_actions}


def test_help_describes_every_command_and_flag():
    parser = build_parser()
    assert parser.prog == "miniagent" and parser.description
    commands, described = _subcommands(parser)
    assert sorted(commands) == ["ask", "eval"] and all(described[name] for name in commands), described
    bools = {"--" + f.name.replace("_", "-") for f in setting_fields() if str(f.type) == "bool"}
    for name, command in commands.items():
        assert command.prog == f"miniagent {name}"
        for action in command._actions:
            assert action.help, (name, action.option_strings or action.dest)
            flag = action.option_strings[0] if action.option_strings else None
            assert action.metavar == ("true|false" if flag in bools else None), (name, flag, action.metavar)
        titles = [group.title for group in command._action_groups]
        assert "settings (override config file and MINIAGENT_* env vars)" in titles, titles


class NeverDone:
    """A future that never finishes, and remembers how long each wait was allowed to be."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def result(self, timeout: float) -> None:
        self.waits.append(timeout)
        raise concurrent.futures.TimeoutError


def test_a_wait_shorter_than_one_wake_up_ends_at_its_own_deadline_not_at_the_next_wake_up():
    future = NeverDone()
    with pytest.raises(concurrent.futures.TimeoutError):
        wait_result(future, SIGNAL_CHECK_S / 5)
    assert future.waits and max(future.waits) <= SIGNAL_CHECK_S / 5, future.waits


def test_a_wait_without_a_deadline_wakes_up_every_signal_check():
    class DoneOnTheThird(NeverDone):
        def result(self, timeout: float) -> str:
            self.waits.append(timeout)
            if len(self.waits) < 3:
                raise concurrent.futures.TimeoutError
            return "done"

    future = DoneOnTheThird()
    assert wait_result(future, None) == "done"
    assert future.waits == [SIGNAL_CHECK_S] * 3


# `python -m miniagent` ends with os._exit once the run is over (miniagent/__main__.py): what that may skip and what
# it must not.

def _module(tmp_path, *argv: str, before: str = "") -> "subprocess.CompletedProcess[str]":
    src = str(Path(__file__).resolve().parents[1] / "src")
    code = (f"import atexit, runpy, sys\n{before}\nsys.argv = ['miniagent', *{list(argv)!r}]\n"
            "runpy.run_module('miniagent', run_name='__main__', alter_sys=True)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": str(tmp_path)})


def test_with_the_trace_on_stdout_stdout_is_json_lines_and_the_answer_goes_to_stderr(tmp_path):
    proc = _module(tmp_path, "ask", "What is the past simple of go for she?", "--llm", "scripted:oracle",
                   "--trace", "-", "--cache-dir", "")
    events = [json.loads(line) for line in proc.stdout.splitlines()]  # `| jq` reads every line
    assert proc.returncode == 0 and events[-1]["event"] == "stop" and events[-1]["answer"] == "she went"
    assert proc.stderr.splitlines()[-2:] == ["she went", proc.stderr.splitlines()[-1]]
    assert proc.stderr.splitlines()[-1].startswith("-- stop_reason: answered")


def test_a_declined_question_exits_3(tmp_path):
    proc = _module(tmp_path, "ask", "What is the dreaming tense of eat for I?", "--llm", "scripted:oracle",
                   "--cache-dir", "")
    assert proc.returncode == 3 and proc.stdout.startswith("I cannot answer that: there is no 'dreaming' tense")
    assert "-- stop_reason: out_of_grammar" in proc.stderr


def test_the_command_still_runs_the_exit_handlers_flushes_its_output_and_keeps_its_status(tmp_path):
    before = "atexit.register(lambda: print('exit handler ran', flush=True))"
    answered = _module(tmp_path, "ask", "What is the past simple of go for she?", "--llm", "scripted:oracle",
                       "--json", "--cache-dir", "", before=before)
    assert answered.returncode == 0, answered.stderr
    assert '"stop_reason": "answered"' in answered.stdout and answered.stdout.rstrip().endswith("exit handler ran")
    capped = _module(tmp_path, "ask", "What is the past simple of go for she?", "--llm", "scripted:stubborn",
                     "--max-turns", "1", "--cache-dir", "", before=before)
    assert capped.returncode == 1 and "-- stop_reason: max_turns" in capped.stderr  # the run's status, not 0
    refused = _module(tmp_path, "ask", "x", "--decode", "beam", before=before)  # main returns 2, no exception
    assert refused.returncode == 2 and "bad setting: decode must be" in refused.stderr
    assert refused.stdout == "exit handler ran\n"


def test_a_conjugation_server_that_cannot_start_ends_the_command_with_its_reason_and_status_2(tmp_path):
    """A learner's edit that breaks the server (here it exits at once, as a syntax error would): like a model file
    that cannot be loaded, the command stops before any run, with the server's own words, the reason and what to
    do, and exit status 2: not a traceback, and not a run (an eval of runs that never had a server would score
    nothing and exit 0)."""
    src = tmp_path / "src"
    shutil.copytree(Path(miniagent.__file__).parent, src / "miniagent", ignore=shutil.ignore_patterns("__pycache__"))
    server = src / "miniagent" / "tools" / "server.py"
    broken = "from __future__ import annotations\nraise SystemExit('broken on purpose')\n"
    server.write_text(server.read_text().replace("from __future__ import annotations\n", broken, 1))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src), "HOME": str(tmp_path)}
    (tmp_path / "one.jsonl").write_text('{"question": "What is the past simple of go for she?", "accept": ["she went"]}\n')
    for command in (["ask", "What is the past simple of go for she?", "--json"], ["eval", "--set", "one.jsonl"]):
        proc = subprocess.run([sys.executable, "-m", "miniagent", *command, "--llm", "scripted:oracle", "--cache-dir", ""],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert proc.stdout == "", command
        said = proc.stderr.splitlines()
        assert said[0] == "broken on purpose", "the server's own words come first"
        assert said[1:] == [f"miniagent: could not start the MCP server ({sys.executable} -m miniagent.tools.server): "
                            "MCPError: Connection closed (the server's own stderr, if any, is above)",
                            "Next: check that `python -m miniagent.tools.server` starts."], command


def test_a_trace_that_cannot_be_written_is_refused_in_one_line(tmp_path):
    """--trace naming a folder (or a file no one may write) ends the command with the system's words and status 2,
    before any run: the run would have nowhere to say what it did."""
    (tmp_path / "trace.d").mkdir()
    proc = _module(tmp_path, "ask", "What is the past simple of go for she?", "--llm", "scripted:oracle",
                   "--cache-dir", "", "--trace", "trace.d")
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == "miniagent: [Errno 21] Is a directory: 'trace.d'\n"


# --- --config FILE: the file named on the command line is the one the run uses ---------------------------------


@pytest.fixture
def no_outside_settings(tmp_path, monkeypatch):
    """No MINIAGENT_* variable of the shell, no ./miniagent.toml, and main()'s SIGTERM handler left out (it
    would stay installed in the test process)."""
    for name in [n for n in os.environ if n.startswith("MINIAGENT_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("miniagent.processes.install_sigterm_handler", lambda: None)


EVAL_SET = str(Path(__file__).resolve().parents[1] / "labs" / "01-tutor-end-to-end" / "eval.jsonl")


@pytest.mark.parametrize("command", [["ask", "What is the past simple of go for she?"],
                                     ["eval", "--set", EVAL_SET, "--limit", "1"]])
def test_the_config_file_named_by_the_flag_reaches_the_run(command, no_outside_settings, tmp_path):
    from miniagent import cli

    file = tmp_path / "class.toml"
    file.write_text('[miniagent]\nllm = "scripted:oracle"\nmax_turns = 4\nwall_clock_s = 17.5\n', encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    assert cli.main([*command, "--config", str(file), "--trace", str(trace), "--json"]) == 0
    starts = [e for e in map(json.loads, trace.read_text(encoding="utf-8").splitlines()) if e["event"] == "run_start"]
    assert [(e["llm"], e["config"]["max_turns"], e["config"]["wall_clock_s"]) for e in starts] == \
        [("scripted:oracle", 4, 17.5)]


@pytest.mark.parametrize("command", [["ask", "q"], ["eval"]])
def test_a_config_file_that_is_not_there_is_refused_before_anything_runs(command, no_outside_settings, tmp_path,
                                                                          capsys):
    from miniagent import cli

    missing = tmp_path / "none.toml"
    assert cli.main([*command, "--config", str(missing)]) == 2
    assert capsys.readouterr().err == f"miniagent: bad setting: config file not found: {missing}\n"
