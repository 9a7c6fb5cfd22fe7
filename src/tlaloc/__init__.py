"""tlaloc: differentiable array programs by source transformation.

The public surface, in one place; everything not listed here is private.
Names load on first use (PEP 562), so ``import tlaloc`` is cheap and the
serving runtime (``tlaloc.serving``) loads without the compiler.
"""
from __future__ import annotations

import importlib
import os

# jaxlib's C++ runtime logs at INFO on stderr ("PjRt-IFRT device count ...") unless this is
# set before it loads, as JAX arranges for its own users; a value the user set wins
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

__version__ = "0.1.0"

# public name -> module that defines it (relative to this package)
_EXPORTS = {
    # reverse and forward mode, batching, custom rules
    "grad": "._ad.api", "value_and_grad": "._ad.api", "vjp": "._ad.api", "source": "._ad.api",
    "jvp": "._ad.forward_api", "jacfwd": "._ad.forward_api", "jacrev": "._ad.forward_api",
    "hessian": "._ad.forward_api",
    "elementwise_grad": "._ad.autograd_names", "hessian_vector_product": "._ad.autograd_names",
    "vmap": "._ad.vmap",
    "custom_vjp": "._ad.custom", "custom_jvp": "._ad.custom", "custom_vjp_jvp": "._ad.custom",
    "ravel_pytree": ".misc.flatten",
    "check_grads": "._ad.check", "check_custom_vjp": "._ad.check", "check_custom_jvp": "._ad.check",
    "stop_gradient": ".numpy",
    # tracing front end and training
    "capture": "._ad.capture",
    "cond": "._frontend.tracing", "while_loop": "._frontend.tracing", "fori_loop": "._frontend.tracing",
    "scan": "._frontend.tracing",
    "save_checkpoint": ".checkpoint_io", "load_checkpoint": ".checkpoint_io",
    # rematerialization
    "checkpoint": "._ad.remat", "checkpoint_policies": "._ad.remat",
    # typed tensors
    "F32": ".typing", "F64": ".typing", "BF16": ".typing", "F16": ".typing", "I32": ".typing",
    "I64": ".typing", "Bool": ".typing", "named": ".typing", "contract": ".typing",
    # compilation
    "jit": "._jit.api",
    # NumPy's float promotion, or strict refusal (``jax.numpy_dtype_promotion``)
    "numpy_dtype_promotion": ".dtypes",
    # DXIR itself
    "Graph": "._core.graph", "eval_graph": "._core.interpreter", "verify": "._core.verifier",
    "make_graph": "._frontend.lower",
    # errors
    "TlalocError": ".errors", "ShapeError": ".errors", "DTypeError": ".errors", "GraphError": ".errors",
    "FenceError": ".errors", "TypeAnnotationError": ".errors", "BoundedAxisError": ".errors", "NoRuleError": ".errors",
    "GradientError": ".errors", "ArgumentError": ".errors", "DistributedError": ".errors",
}
_SUBMODULES = ("numpy", "scipy", "random", "misc", "extend", "nn", "optim", "kernels", "models", "serving", "typing",
               "errors", "dtypes", "sharding", "distributed")

__all__ = ["__version__", *_SUBMODULES, *_EXPORTS]


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'tlaloc' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
