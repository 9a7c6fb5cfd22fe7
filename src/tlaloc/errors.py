"""Every error a tlaloc user can meet, in one module.

Each class is one failure a user can meet. Messages name the argument, what was
expected and how to fix it; errors raised while a function is being lowered also
carry the user's ``file:line:col``.
"""
from __future__ import annotations

import re


class TlalocError(Exception):
    """Base class of every error tlaloc raises on purpose."""


class ShapeError(TlalocError, ValueError):
    """Operand shapes do not fit an operation.

    Example: ``tnp.matmul(a, b)`` with ``a.shape == (2, 3)`` and ``b.shape == (4, 5)``
    raises ``ShapeError: matmul: a has 3 columns but b has 4 rows; transpose b or
    reshape it to (3, k)``.
    """


class RankUnknownError(ShapeError):
    """An operation needs the rank of an operand whose rank is not known yet (a function built
    before its first call, with unannotated arguments). The front end then builds the function
    again at its first call, for the arguments' shapes; elsewhere it says to annotate."""


class DTypeError(TlalocError, TypeError):
    """Operand dtypes do not fit an operation.

    Float dtypes promote as NumPy promotes them (``float32 + float64`` is float64);
    under ``tl.numpy_dtype_promotion("strict")``, and between the dtypes a function's
    typed-tensor annotations declare, ``tnp.add(x32, y64)`` raises instead, naming
    both operands, and says to convert one with ``.astype``. bfloat16 with float16
    (which NumPy cannot promote) always raises.
    """


class GraphError(TlalocError):
    """A DXIR graph is malformed; the message names the offending node."""


class FenceError(TlalocError, SyntaxError):
    """A Python construct outside the differentiable subset (the language fence).

    Raised when ``grad``/``jit``/``vmap`` is applied, never at run time. The
    message gives ``file:line:col``, names the construct and says what to write
    instead.
    """

    def __init__(self, message: str, filename: str | None = None,
                 lineno: int | None = None, col: int | None = None):
        self.where = f"{filename}:{lineno}:{col}" if filename else None
        text = f"{self.where}: {message}" if self.where else message
        super().__init__(text)
        # SyntaxError fields, so tracebacks point at the user's line.
        self.filename, self.lineno, self.offset, self.msg = filename, lineno, col, text

    def __str__(self) -> str:
        return self.msg


class TypeAnnotationError(FenceError):
    """A typed-tensor annotation (``F32["batch", "hidden"]``) is violated.

    Raised at definition time with ``file:line:col`` and both operand types, or at
    call time naming the argument whose shape disagrees with its annotation.
    """


class BoundedAxisError(TypeAnnotationError):
    """An operation would see the padding of a bounded axis (``F32["seq<=512"]``).

    ``tl.jit`` runs a bounded axis padded to a bucket; reductions and contractions
    over it are masked, but an operation whose result would depend on the padding
    and that tlaloc does not mask (``flip``, a negative index, a ``reshape`` that
    merges the axis, a loop over it, ...) is refused at the user's ``file:line:col``,
    never computed on the padding. Example: ``tnp.flip(x, 0)`` with ``x:
    F32["seq<=512", "d"]`` under ``tl.jit``.
    """


class NoRuleError(TlalocError, NotImplementedError):
    """A transform met a primitive without a rule for it.

    Example: ``no VJP rule for `argmax```. The message names the primitive and the
    transform.
    """


def at_location(err: TlalocError, loc) -> TlalocError:
    """``err``, raised by a primitive's rule that refuses its parameters, with ``loc`` (the
    user's ``file:line:col`` of the node) in front, unless it is there already."""
    if loc is None or re.match(r"\S+:\d+:\d+: ", str(err)):       # located already (a nested node)
        return err
    return type(err)(f"{loc}: {err}").with_traceback(err.__traceback__)


class GradientError(TlalocError, TypeError):
    """A gradient was requested where none is defined.

    Examples: a gradient with respect to an integer or bool input, or ``grad`` of a
    function whose output is not a scalar.
    """


class ArgumentError(TlalocError, ValueError):
    """A public function got an argument it cannot use; the message names it."""


class DistributedError(TlalocError, RuntimeError):
    """A multi-process run (``tlaloc.distributed``) cannot go on.

    Examples: another process stopped while this one waited for it in a collective
    (``process 0 of 2: running `train_step`: a collective failed because another
    process of the run stopped``), or the processes compiled different programs or
    shapes (both signatures are named). The message names this process, and the
    other one where it is known.
    """


__all__ = [
    "TlalocError", "ShapeError", "DTypeError", "GraphError", "FenceError",
    "TypeAnnotationError", "BoundedAxisError", "NoRuleError", "GradientError", "ArgumentError",
    "DistributedError",
]
