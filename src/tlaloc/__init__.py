"""tlaloc: differentiable array programs by source transformation.

The public surface, in one place. Everything not listed here is private.
"""
__version__ = "0.1.0"

from . import errors, dtypes  # noqa: E402
from . import numpy  # noqa: E402  (tlaloc.numpy)
from ._core.builder import _install_operators as _install  # noqa: E402

_install()

from ._ad.api import grad, value_and_grad, vjp, source  # noqa: E402
from ._ad.vmap import vmap  # noqa: E402
from ._ad.forward_api import jvp, jacfwd, jacrev, hessian  # noqa: E402
from ._ad.capture import capture  # noqa: E402
from ._frontend.tracing import cond, while_loop, fori_loop, scan  # noqa: E402
from .numpy import stop_gradient  # noqa: E402
from ._ad.custom import custom_vjp, custom_jvp, custom_vjp_jvp  # noqa: E402
from ._ad.check import check_grads, check_custom_vjp, check_custom_jvp  # noqa: E402
from . import typing  # noqa: E402,F401  (typed tensors; installs the front-end hooks)
from .typing import F32, F64, BF16, F16, I32, I64, Bool, named, contract  # noqa: E402
from ._jit.api import jit  # noqa: E402
from . import nn, optim  # noqa: E402  (tl.nn layers, tl.optim optimizers)
from . import kernels  # noqa: E402  (tl.kernels: PTX DSL, simulator, library kernels, Mosaic)
from .checkpoint import save_checkpoint, load_checkpoint  # noqa: E402
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
    "nn", "optim", "kernels", "save_checkpoint", "load_checkpoint",
    "__version__", "numpy", "errors", "dtypes",
    "grad", "value_and_grad", "vjp", "source", "stop_gradient", "vmap", "jit",
    "jvp", "jacfwd", "jacrev", "hessian", "capture", "cond", "while_loop", "fori_loop", "scan",
    "make_graph", "eval_graph", "verify", "Graph",
    "ShapeError", "DTypeError", "GraphError", "FenceError", "TypeAnnotationError",
    "NoRuleError", "GradientError", "ArgumentError", "TlalocError",
    "custom_vjp", "custom_jvp", "custom_vjp_jvp", "check_grads", "check_custom_vjp", "check_custom_jvp",
    "typing", "F32", "F64", "BF16", "F16", "I32", "I64", "Bool", "named", "contract",
]
