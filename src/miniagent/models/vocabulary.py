"""A GGUF file's tokenizer, as every decoder here uses it: tokens, text, and masks over the vocabulary.

The local runtime reads it from the model it loaded; the server runtime from the same file read without its
weights (``vocab_only``), so that both count, cut and mask tokens alike.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np


class Vocabulary:
    def __init__(self, model, path: str) -> None:
        self.model = model  # llama_cpp._internals.LlamaModel, weights loaded or not
        self.path = path
        self.size = model.n_vocab()
        self._pieces: dict[int, str] = {}

    def tokenize(self, text: str, *, bos: bool = False) -> list[int]:
        return self.model.tokenize(text.encode("utf-8"), add_bos=bos, special=False)

    def detokenize(self, tokens: list[int]) -> str:
        return self.model.detokenize(tokens, special=False).decode("utf-8", errors="replace")

    def piece(self, token: int) -> str:
        """One token's text as a server names it in its log-probabilities (bytes that are not whole UTF-8 left out)."""
        if token not in self._pieces:
            self._pieces[token] = self.model.detokenize([token]).decode("utf-8", errors="ignore")
        return self._pieces[token]

    def masks(self, cache_dir: Path | None) -> dict[str, np.ndarray]:
        """Boolean masks over the vocabulary: lowercase-word tokens, and string-safe tokens (kept in ``cache_dir``
        when one is given)."""
        path = None
        model_file = (self.path, os.path.getsize(self.path))
        if cache_dir is not None:
            key = hashlib.sha256(repr(model_file).encode()).hexdigest()
            path = Path(cache_dir) / f"masks-{key[:24]}.npz"
            if path.is_file():
                with np.load(path) as data:
                    return {name: data[name] for name in data.files}
        masks = _COMPUTED.get(model_file) or self._compute_masks()
        _COMPUTED[model_file] = masks
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch = path.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez(scratch, **masks)
            os.replace(scratch, path)
        return masks

    def _compute_masks(self) -> dict[str, np.ndarray]:
        pieces = [self.model.token_to_piece(i).rstrip(b"\0").decode("utf-8", errors="replace")
                  for i in range(self.size)]
        masks = {
            "word": np.array([p.isascii() and p.isalpha() and p.islower() for p in pieces]),
            "text": np.array([bool(p) and "\ufffd" not in p and not any(c in p for c in '"\\\n\r\t')
                              and p.isprintable() for p in pieces]),
        }
        for mask in masks.values():
            mask.flags.writeable = False  # shared by every vocabulary of the same file in this process
        return masks


# Masks computed in this process, per model file (path, size): reading 262k token pieces through llama.cpp costs
# about a second, and a process that opens several backends without a cache folder (a class's tests, a teacher's
# checks) would pay it for each.
_COMPUTED: dict[tuple[str, int], dict[str, np.ndarray]] = {}
