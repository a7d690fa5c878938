"""The four configuration layers, on generated values: every valid value reaches its wing's settings (the loop's,
the model's), every wrong one is refused with a message that names the setting and what it expects."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from miniagent.agent.config import _BOOL_WORDS, ConfigError
from miniagent.settings import Settings, load_config, setting_fields

INTS = [f.name for f in setting_fields() if f.type == "int"]
MUST_BE_POSITIVE = ("max_input_chars", "max_turns", "max_tool_calls", "max_plan_tool_calls", "max_consecutive_failures",
                    "max_action_tokens", "max_run_tokens", "max_format_errors", "n_ctx")
ZERO_OR_MORE = ("calls_per_plan_step", "n_threads", "max_repeats", "max_auto_continues", "openai_max_retries")
assert set(MUST_BE_POSITIVE + ZERO_OR_MORE) == set(INTS), "every integer setting has a bound, and this test knows it"
spellings = st.builds(lambda word, upper, pad: (word.upper() if upper else word).center(len(word) + pad),
                      st.sampled_from(sorted(_BOOL_WORDS)), st.booleans(), st.integers(0, 2))


@given(word=spellings, layer=st.sampled_from(("env", "cli")))
def test_a_boolean_setting_takes_any_spelling_of_true_or_false(word, layer, tmp_path_factory):
    """Any spelling of true or false, in any case and with spaces around it, reaches the loop as that value.

    (es) Cualquier forma de escribir true o false, en mayúsculas o minúsculas y con espacios, llega al bucle con ese valor.
    """
    empty = tmp_path_factory.mktemp("cfg") / "none.toml"  # an empty config file: not the checkout's
    empty.write_text("", encoding="utf-8")
    env = {"MINIAGENT_CONFIG": str(empty), "MINIAGENT_FINAL_ANSWER_ROUND": word} if layer == "env" else \
        {"MINIAGENT_CONFIG": str(empty)}
    cli = {"final_answer_round": word} if layer == "cli" else {}
    assert load_config(cli=cli, env=env).tutor.final_answer_round is _BOOL_WORDS[word.strip().lower()]


@given(word=st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=6)
       .filter(lambda w: w.strip().lower() not in _BOOL_WORDS))
def test_a_wrong_boolean_is_refused_naming_the_setting(word, tmp_path_factory):
    """A value that is not true or false is refused, and the message names the setting and says true or false.

    (es) Un valor que no es true ni false se rechaza, y el mensaje nombra el ajuste y dice true o false.
    """
    empty = tmp_path_factory.mktemp("cfg") / "none.toml"
    empty.write_text("", encoding="utf-8")
    env = {"MINIAGENT_CONFIG": str(empty), "MINIAGENT_FINAL_ANSWER_ROUND": word}
    with pytest.raises(ConfigError, match=r"MINIAGENT_FINAL_ANSWER_ROUND: expected true or false"):
        load_config(env=env)


@given(name=st.sampled_from(INTS), value=st.integers(-3, 50), given_as=st.sampled_from(("cli", "env", "file")),
       others=st.dictionaries(st.sampled_from([n for n in INTS if n != "n_ctx"]), st.one_of(st.none(),
                              st.integers(1, 9)), max_size=3))
def test_an_integer_setting_reaches_the_config_or_is_refused_by_name(name, value, given_as, others,
                                                                      tmp_path_factory):
    """An integer setting from any layer reaches the settings as given, or is refused with a message naming it;
    flags left out (None) change nothing.

    (es) Un ajuste entero, venga de la capa que venga, llega a los ajustes tal cual o se rechaza con un mensaje
    que lo nombra; las opciones que no se dan (None) no cambian nada.
    """
    folder = tmp_path_factory.mktemp("cfg")
    file = folder / "miniagent.toml"
    file.write_text(f"[miniagent]\n{name} = {value}\n" if given_as == "file" else "", encoding="utf-8")
    env = {"MINIAGENT_CONFIG": str(file), "MINIAGENT_N_CTX": "",  # an empty variable is a variable not set
           **({f"MINIAGENT_{name.upper()}": str(value)} if given_as == "env" else {})}
    cli = {k: v for k, v in others.items() if k != name}
    if given_as == "cli":
        cli[name] = value
    lowest = 1 if name in MUST_BE_POSITIVE else 0 if name in ZERO_OR_MORE else None
    if lowest is not None and value < lowest:
        with pytest.raises(ConfigError, match=name):
            load_config(cli=cli, env=env)
        return
    config, default = load_config(cli=cli, env=env).as_dict(), Settings().as_dict()
    assert config[name] == value
    if name != "n_ctx":
        assert config["n_ctx"] == default["n_ctx"]
    for other, given_value in cli.items():
        assert config[other] == (given_value if given_value is not None else default[other])


@given(name=st.sampled_from(("wall_clock_s", "tool_timeout_s")), value=st.sampled_from((0.0, -1.0, 0.001, 2.5)))
def test_a_time_limit_must_be_positive(name, value):
    """A time limit of zero or less is refused by name; any positive one reaches the config.

    (es) Un plazo de cero o menos se rechaza nombrándolo; cualquiera positivo llega a la configuración.
    """
    if value <= 0:
        with pytest.raises(ConfigError, match=f"{name} must be positive"):
            load_config(cli={name: value}, env={})
    else:
        assert getattr(load_config(cli={name: value}, env={}).tutor, name) == value


def test_the_environment_is_read_when_none_is_given(monkeypatch, tmp_path):
    (tmp_path / "none.toml").write_text("", encoding="utf-8")
    monkeypatch.setenv("MINIAGENT_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("MINIAGENT_MAX_TURNS", "3")
    assert load_config().tutor.max_turns == 3


def test_unknown_settings_and_missing_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting 'max_turnz'"):
        load_config(cli={"max_turnz": 3}, env={})
    with pytest.raises(ConfigError, match="config file not found: .*nowhere.toml"):
        load_config(path=tmp_path / "nowhere.toml", env={})
    for name, message in (("n_threads", "0 \\(auto\\) or more"), ("max_repeats", "0 \\(off\\) or more"),
                          ("max_auto_continues", "0 or more"), ("openai_max_retries", "0 or more"),
                          ("model_wall_clock_s", "0 \\(model calls count in wall_clock_s\\) or more")):
        with pytest.raises(ConfigError, match=f"{name} must be {message}"):
            load_config(cli={name: -1}, env={})


@pytest.mark.parametrize("name", ["n_threads", "max_repeats", "max_auto_continues", "openai_max_retries",
                                  "model_wall_clock_s"])
def test_zero_is_accepted_where_it_means_off_auto_or_none(name):
    """0 reaches the config for the settings where it means off, auto or none; -1 is refused naming the setting.

    (es) 0 llega a la configuración en los ajustes donde significa apagado, automático o ninguno; -1 se rechaza nombrando el ajuste.
    """
    assert load_config(cli={name: 0}, env={}).as_dict()[name] == 0
    with pytest.raises(ConfigError, match=f"^{name} must be 0 "):
        load_config(cli={name: -1}, env={})
