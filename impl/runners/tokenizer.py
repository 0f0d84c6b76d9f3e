"""Text in, text out: a checkpoint's ``tokenizer.json`` through the ``tokenizers`` package.

Optional (the ``text`` extra): token-id prompts never need it, and nothing
loads ``tokenizers`` until text arrives. Encoding applies the tokenizer's own
post-processor (a Llama tokenizer adds its BOS there, as transformers does);
decoding skips special tokens, so an EOS that ended a request is not printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from densegate.impl.runners.hf_config import CheckpointError

__all__ = ["TextCodec"]


class TextCodec:
    """A checkpoint's tokenizer, loaded on first use; a clear error when there is none."""

    def __init__(self, checkpoint: str | Path | None) -> None:
        self.path = None if checkpoint is None else Path(checkpoint) / "tokenizer.json"
        self._tok: Any = None

    @property
    def available(self) -> bool:
        """True when the checkpoint has a ``tokenizer.json`` (the package may still be missing)."""
        return self.path is not None and self.path.is_file()

    def _loaded(self) -> Any:
        if self._tok is not None:
            return self._tok
        if self.path is None:
            raise ValueError("text needs a checkpoint with a tokenizer.json (EngineConfig.model)")
        if not self.path.is_file():
            raise ValueError(f"text needs {self.path}, which does not exist; pass token ids")
        try:
            from tokenizers import Tokenizer
        except ModuleNotFoundError:
            raise ValueError(
                "text prompts need the tokenizers package, the 'text' extra: in a densegate "
                "checkout, pip install '.[text]' (token ids, --prompt-ids, need none)"
            ) from None
        try:
            self._tok = Tokenizer.from_file(str(self.path))
        except Exception as e:  # tokenizers raises a bare Exception ("key must be a string")
            raise CheckpointError(f"{self.path}: not a valid tokenizer.json ({e})") from None
        return self._tok

    def load(self) -> None:
        """Load the tokenizer now (a bad ``tokenizer.json`` raises here, not after a run)."""
        self._loaded()

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise ValueError(f"text prompt must be a str, got {text!r}")
        ids: list[int] = self._loaded().encode(text).ids
        return ids

    def encode_all(self, prompts: Sequence[object]) -> tuple[bool, Sequence[Any]]:
        """``(True, ids)`` when every prompt is text, else ``(False, prompts)`` untouched."""
        texts = [p for p in prompts if isinstance(p, str)]
        if texts and len(texts) == len(prompts):
            return True, [self.encode(t) for t in texts]
        return False, prompts

    def decode(self, ids: Sequence[int]) -> str:
        text: str = self._loaded().decode(list(ids), skip_special_tokens=True)
        return text
