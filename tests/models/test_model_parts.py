"""Small parts of the model backends that a learner reads the output of: the start-up line, llama.cpp's captured
load log, and the token counts a model server reports."""

from __future__ import annotations

import ctypes
import gc
import sys

import pytest

from miniagent.models.llama_params import AmxChoice, LlamaLog, model_params, weight_buffers
from miniagent.models.llama_runtime import LLAMA_LOG, KVRuntime
from miniagent.models.server_client import token_count


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
    assert token_count(value) == counted


@pytest.mark.real_model
def test_llama_log_keeps_the_load_log_only_while_capturing_and_never_fails_outside(monkeypatch):
    """A fresh LlamaLog (the lab's own is made at import) takes llama.cpp's log over; the lab's is put back."""
    from llama_cpp import _internals as internals

    from miniagent.models.model_file import default_model_path

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
        with log.capture() as odd:  # a path in the log that is not UTF-8 (a model file's name, say): kept, marked
            log._callback(2, b"loading /models/caf\xe9.gguf\n", None)
        assert odd == ["loading /models/caf\ufffd.gguf\n"]
    finally:
        import llama_cpp

        llama_cpp.llama_log_set(LLAMA_LOG._callback, ctypes.c_void_p(0))
    assert [f.exc_value for f in failed] == []


def status_error(body, message="Error code: 400"):
    """The error the openai client raises for an HTTP 400, built as the client builds it."""
    import openai

    try:
        import httpx2 as httpx  # the HTTP library of the openai client 3.x
    except ImportError:  # pragma: no cover - older clients
        import httpx

    response = httpx.Response(400, request=httpx.Request("POST", "http://server/v1/completions"))
    return openai.BadRequestError(message, response=response, body=body)


@pytest.mark.parametrize("body, said", [
    ({"error": {"message": "response_format must be json_object", "detail": "x"}}, "response_format must be json_object"),
    ({"error": {"detail": "unknown model 'gemma'"}}, "unknown model 'gemma'"),
    ({"error": {"code": 7}}, '{"code": 7}'),        # neither message nor detail: the whole error, as JSON
    ({"error": "slots are full"}, "slots are full"),
    ({"detail": "Not Found"}, "Not Found"),  # no "error" key: the body itself is read the same way
    ("  plain text from a proxy \n", "plain text from a proxy"),
    ("   ", "Error code: 400"),                      # an empty body: the client's own message
    (None, "Error code: 400"),
])
def test_a_refusal_says_the_servers_own_words(body, said):
    from miniagent.models.server_client import _status_detail

    assert _status_detail(status_error(body)) == said


def test_without_a_message_attribute_the_error_itself_is_shown():
    from miniagent.models.server_client import _status_detail

    assert _status_detail(ValueError("the connection reset")) == "the connection reset"


def test_a_refused_request_keeps_its_status():
    from miniagent.models.server_client import RequestRefused

    refused = RequestRefused("the model server answered HTTP 404: gone", 404)
    assert (str(refused), refused.status) == ("the model server answered HTTP 404: gone", 404)


class PiecesModel:
    """What a vocabulary reads of a model: its size and each token's text (counted: each read is a llama.cpp call)."""

    reads = 0
    PIECES = [b"go", b"Go", b'"', b" went\0", b"XX", b"\xff", b"tab\t"]

    def n_vocab(self):
        return len(self.PIECES)

    def token_to_piece(self, token):
        PiecesModel.reads += 1
        return self.PIECES[token]


def test_a_model_files_masks_are_computed_once_in_a_process_and_still_saved_where_asked(tmp_path, monkeypatch):
    import re

    from miniagent.models import vocabulary
    from miniagent.models.vocabulary import Vocabulary

    monkeypatch.setattr(vocabulary, "_COMPUTED", {})
    model_file, cache = tmp_path / "model.gguf", tmp_path / "cache" / "folder"
    model_file.write_bytes(b"weights")
    PiecesModel.reads = 0
    first = Vocabulary(PiecesModel(), str(model_file)).masks(None)
    assert PiecesModel.reads == 7
    assert first["word"].tolist() == [True, False, False, False, False, False, False]  # a lowercase word only
    # whatever a JSON string holds as it is: not a quote, a control character or a byte that is not UTF-8
    assert first["text"].tolist() == [True, True, False, True, True, False, False]
    again = Vocabulary(PiecesModel(), str(model_file)).masks(cache)
    assert PiecesModel.reads == 7, "the same file: its masks are not read token by token again"
    [saved] = cache.glob("*")
    assert re.fullmatch(r"masks-[0-9a-f]{24}\.npz", saved.name), "the name earlier versions gave it"
    assert all(again[name].tolist() == first[name].tolist() for name in first)
    with pytest.raises(ValueError):
        first["word"][0] = False  # shared: nobody may change them
    monkeypatch.setattr(vocabulary, "_COMPUTED", {})  # a new process: the file is read, not the tokens
    loaded = Vocabulary(PiecesModel(), str(model_file)).masks(cache)
    assert PiecesModel.reads == 7 and all(loaded[name].tolist() == first[name].tolist() for name in first)
    model_file.write_bytes(b"other weights")  # another file (another size): its own masks, its own cache file
    Vocabulary(PiecesModel(), str(model_file)).masks(cache)
    assert PiecesModel.reads == 14 and len(list(cache.glob("masks-*.npz"))) == 2


@pytest.fixture(scope="module")
def vocab():
    """The real tokenizer, read from the model file without its weights (as the openai backend reads it)."""
    from llama_cpp import _internals as internals

    from miniagent.models.llama_params import vocab_only_params
    from miniagent.models.model_file import default_model_path
    from miniagent.models.vocabulary import Vocabulary

    model = internals.LlamaModel(path_model=default_model_path(), params=vocab_only_params(), verbose=False)
    yield Vocabulary(model, default_model_path())
    model.close()


@pytest.mark.real_model
def test_a_question_that_spells_a_special_token_is_still_text(vocab):
    """A learner's `<eos>` is four characters, never the end of the model's text (nor its start: `<bos>`)."""
    tokens = vocab.tokenize("<eos> hi <bos>")
    assert len(tokens) > 3 and vocab.detokenize(tokens) == "<eos> hi <bos>"
    with_bos = vocab.tokenize("hi", bos=True)
    assert len(with_bos) == 2 and with_bos[1:] == vocab.tokenize("hi")
    assert vocab.detokenize(with_bos) == "hi", "the model's own start token is not text"


@pytest.mark.real_model
def test_a_token_that_is_part_of_a_character_reads_as_a_replacement_or_as_nothing(vocab):
    parts = vocab.tokenize("ꙮ")  # a rare character: three byte tokens
    assert len(parts) == 3 and vocab.detokenize(parts) == "ꙮ"
    assert vocab.detokenize(parts[:1]) == "\ufffd", "half a character is shown as such, never an exception"
    assert vocab.piece(parts[0]) == "", "a server names a token by its whole characters: here, none"
    assert vocab.piece(vocab.tokenize("go")[0]) == "go" and vocab.piece(parts[0]) == ""  # asked twice: kept
