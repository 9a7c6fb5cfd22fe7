"""The errors a user meets while loading a checkpoint.

They subclass :class:`tlaloc.errors.TlalocError`; a later move into ``tlaloc.errors``
keeps every ``except`` clause working.
"""
from __future__ import annotations

import contextlib

from ..errors import TlalocError


class CheckpointError(TlalocError, ValueError):
    """A checkpoint does not fit the model its config describes.

    Raised before any weight is read. The message names every missing key, every
    unexpected key and every shape mismatch, for example::

        CheckpointError: checkpoint /m does not fit LlamaForCausalLM (2 layers):
          missing keys (1): model.layers.1.mlp.up_proj.weight
          shape mismatch (1): model.norm.weight: expected (64,), got (32,)
    """


class UnsupportedModelError(TlalocError, ValueError):
    """A config names an architecture, rope type, tokenizer or quantization tlaloc does not read.

    The message names the field, the value found and the values supported.
    """


@contextlib.contextmanager
def naming(source: str):
    """Prefix the message of a CheckpointError or UnsupportedModelError raised inside with ``source``.

    Config and tokenizer readers see parsed values, not files; the loader wraps them so
    every message says which file it is about. A message that already names ``source``
    is left alone.
    """
    try:
        yield
    except (CheckpointError, UnsupportedModelError) as e:
        if source in str(e):
            raise
        raise type(e)(f"{source}: {e}") from None
