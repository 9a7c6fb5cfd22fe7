"""The errors a serving user can meet (the runtime's; compile-side errors are in ``tlaloc.errors``).

Each names what was wrong and what to do. All derive from ``tlaloc.errors.TlalocError``.
"""
from __future__ import annotations

from ..errors import ArgumentError, TlalocError


class ArtifactError(TlalocError):
    """An artifact directory cannot be served as it is.

    Examples: a file whose sha256 differs from the manifest's (``artifact file
    programs/decode_b1_c64.mlir: sha256 mismatch ...; re-export it``), a manifest of an
    unknown ``schema_version``, a missing file.
    """


class CapacityError(TlalocError, ValueError):
    """A request does not fit what the artifact was exported for, and is refused (never clamped).

    Example: a 300-token prompt with ``max_new_tokens=32`` against a largest context
    bucket of 256: ``prompt (300 tokens) + max_new_tokens (32) = 332 is over the
    artifact's largest context 256; shorten the prompt, ask for fewer tokens, or
    export with a larger --context``.
    """


class QueueFullError(CapacityError):
    """The engine's waiting queue is full (back-pressure); retry later or raise ``max_waiting``."""


__all__ = ["ArtifactError", "CapacityError", "QueueFullError", "ArgumentError", "TlalocError"]
