"""What the MCP client says when it refuses a call before sending it, word for word (the loop shows it to the model).

Found by ``invoke mutants --wing tools``: the property tests check that such a call is refused and that nothing
is sent, not what the refusal says."""

from __future__ import annotations

import pytest

from miniagent.agent.errors import ToolError
from miniagent.tools.arguments import _short_repr, check_arguments
from miniagent.tools.mcp_client import _root_cause


@pytest.mark.parametrize("tool, args, says", [
    (3, {}, "the tool name must be plain text, not int 3"),
    ("bad\ud800", {}, "the tool name must be plain text, not str 'bad\\ud800'"),
    ("conjugate", ["go"], "conjugate: the arguments must be an object (a dict), not list"),
    ("conjugate", {1: "go"}, "conjugate: argument name 1 is not plain text; nothing was sent"),
    ("conjugate", {"ve\udc00rb": "go"}, "conjugate: argument name 've\\udc00rb' is not plain text; nothing was sent"),
    ("conjugate", {"verb": "g\ud800o"}, "conjugate: argument 'verb' cannot be sent: it holds an unpaired UTF-16 "
                                        "surrogate (\\ud800), which is not text; nothing was sent"),
    ("conjugate", {"verb": float("nan")}, "conjugate: argument 'verb' cannot be sent: it is not a JSON value "
                                          "(Out of range float values are not JSON compliant"),
    ("conjugate", {"verb": {1j}}, "conjugate: argument 'verb' cannot be sent: it is not a JSON value "
                                  "(Object of type set is not JSON serializable); nothing was sent"),
])
def test_a_call_that_cannot_be_sent_is_refused_saying_why(tool, args, says):
    with pytest.raises(ToolError) as refused:
        check_arguments(tool, args)
    assert str(refused.value).startswith(says), str(refused.value)


def test_a_call_that_can_be_sent_passes():
    assert check_arguments("conjugate", {"verb": "go", "tense": "past simple", "person": "she", "n": 1.5}) is None


def test_a_value_is_quoted_up_to_forty_characters():
    assert _short_repr("x" * 38) == "'" + "x" * 38 + "'"  # 40 characters with its quotes: whole
    assert _short_repr("x" * 39) == "'" + "x" * 39 + "..."  # 41: cut at 40


def test_an_error_wrapped_in_single_exception_groups_is_unwrapped_and_a_real_group_is_kept():
    inner = ValueError("the cause")
    assert _root_cause(ExceptionGroup("outer", [ExceptionGroup("inner", [inner])])) is inner
    pair = ExceptionGroup("two", [inner, KeyError("k")])
    assert _root_cause(ExceptionGroup("outer", [pair])) is pair
    assert _root_cause(inner) is inner
