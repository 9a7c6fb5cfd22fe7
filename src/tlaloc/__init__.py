"""tlaloc: differentiable array programs by source transformation.

The public surface, in one place. Everything not listed here is private.
"""
__version__ = "0.1.0"

from . import errors, dtypes  # noqa: E402
from . import numpy  # noqa: E402  (tlaloc.numpy)
from ._core.builder import _install_operators as _install  # noqa: E402

_install()

from ._ad.api import grad, value_and_grad, vjp, source  # noqa: E402
from ._ad.forward_api import jvp, jacfwd, jacrev, hessian  # noqa: E402
from ._ad.capture import capture  # noqa: E402
from ._frontend.tracing import cond, while_loop, fori_loop, scan  # noqa: E402
from .numpy import stop_gradient  # noqa: E402
from ._core.graph import Graph  # noqa: E402
from ._core.interpreter import eval_graph  # noqa: E402
from ._core.verifier import verify  # noqa: E402
from .errors import (ShapeError, DTypeError, GraphError, FenceError, TypeAnnotationError,  # noqa: E402
                     NoRuleError, GradientError, ArgumentError, TlalocError)
from ._frontend.lower import lower_function as _lower_function  # noqa: E402


def make_graph(fun) -> Graph:
    """The DXIR graph of ``fun``'s source (every parameter an array of unknown shape)."""
    return _lower_function(fun).graph


__all__ = [
    "__version__", "numpy", "errors", "dtypes",
    "grad", "value_and_grad", "vjp", "source", "stop_gradient",
    "jvp", "jacfwd", "jacrev", "hessian", "capture", "cond", "while_loop", "fori_loop", "scan",
    "make_graph", "eval_graph", "verify", "Graph",
    "ShapeError", "DTypeError", "GraphError", "FenceError", "TypeAnnotationError",
    "NoRuleError", "GradientError", "ArgumentError", "TlalocError",
]
