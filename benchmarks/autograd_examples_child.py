"""One run of one autograd example, original or port (the child process of
``autograd_examples.py``; not meant to be run by hand).

    python autograd_examples_child.py SIDE SCRIPT ORIGINAL OUT CALLS STUBS

SIDE is ``autograd`` (the example as written) or ``tlaloc`` (its port). The
child puts STUBS first on ``sys.path`` (a matplotlib that draws nothing, MNIST
as seeded synthetic digits), wraps the gradient transforms that the example
imports so that each gradient the program computes is recorded, seeds NumPy's
global stream and unseeded ``RandomState()``s, runs SCRIPT as
``__main__`` and stops it after CALLS recorded gradients. ``__file__`` names
ORIGINAL, the autograd file, so that an example reading its own source as
training text (rnn, lstm, hmm_em) or its images (fluidsim) reads the same bytes
in both runs. The recorded gradients, or the first line of the error that
stopped the run, are pickled to OUT.

A gradient is recorded when a transform's result is called from the program
itself: not from inside another transform (autograd passes boxed values then;
tlaloc's front end lowers the call instead of making it) and not nested in
another recorded call. The wrappers carry the wrapped function's module and
name (``functools.wraps``), and a transformed function keeps
``__tlaloc_transformed__``, so tlaloc's front end treats them as the functions
they wrap.
"""
from __future__ import annotations

import functools
import os
import pickle
import sys
import traceback

TRANSFORMS = ("grad", "value_and_grad", "elementwise_grad", "hessian_vector_product")


class Enough(BaseException):
    """Raised after the requested number of gradients (not an Exception: examples catch those)."""


class Recorder:
    def __init__(self, calls: int, side: str):
        self.calls, self.side = calls, side
        self.depth = 0
        self.results: list = []

    def concrete(self, tree) -> bool:
        import numpy as np
        leaves = _leaves(tree)
        return all(isinstance(x, (np.ndarray, np.generic, float, int, complex, bool)) for x in leaves)

    def wrap(self, transform):
        recorder = self

        @functools.wraps(transform)
        def make(fun, *args, **kwargs):
            inner = transform(getattr(fun, "__recorded_inner__", fun), *args, **kwargs)

            @functools.wraps(inner, assigned=("__module__", "__name__", "__qualname__", "__doc__"),
                             updated=())
            def recorded(*a, **k):
                recorder.depth += 1
                try:
                    out = inner(*a, **k)
                finally:
                    recorder.depth -= 1
                if recorder.depth == 0 and recorder.concrete((a, k)) and recorder.concrete(out):
                    import numpy as np
                    recorder.results.append([np.array(x, dtype=np.result_type(x, np.float64))
                                             for x in _leaves(out)])
                    if len(recorder.results) >= recorder.calls:
                        raise Enough()
                return out

            recorded.__recorded_inner__ = inner
            if hasattr(inner, "__tlaloc_transformed__"):
                recorded.__tlaloc_transformed__ = inner.__tlaloc_transformed__
            return recorded
        return make


def _leaves(tree) -> list:
    """Array leaves in a fixed order (dicts by sorted key), the same for both libraries' outputs."""
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in _leaves(tree[k])]
    if isinstance(tree, (list, tuple)):
        return [x for item in tree for x in _leaves(item)]
    return [tree]


def _install(side: str, recorder: Recorder) -> None:
    if side == "autograd":
        import autograd as lib
    else:
        sys.modules["autograd"] = None          # a port that still imports autograd fails loudly
        import tlaloc as lib
    for name in TRANSFORMS:
        setattr(lib, name, recorder.wrap(getattr(lib, name)))


def _seed_everything() -> None:
    """Both runs draw the same numbers: the global NumPy stream is seeded, and a
    ``RandomState()`` made without a seed (convnet's) gets seed 0."""
    import numpy as np
    np.random.seed(0)
    base = np.random.RandomState

    class SeededRandomState(base):
        def __init__(self, seed=None):
            super().__init__(0 if seed is None else seed)
    SeededRandomState.__name__ = SeededRandomState.__qualname__ = "RandomState"
    np.random.RandomState = SeededRandomState


def main(side, script, original, out, calls, stubs):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.path[:0] = [stubs, os.path.dirname(script)]
    os.chdir(os.path.dirname(out))         # files an example writes land next to OUT
    recorder = Recorder(int(calls), side)
    result = {"side": side, "error": None, "grads": recorder.results}
    try:
        _seed_everything()
        _install(side, recorder)
        with open(script) as fh:
            code = compile(fh.read(), script, "exec")
        globs = {"__name__": "__main__", "__file__": original, "__builtins__": __builtins__}
        import types
        main_module = types.ModuleType("__main__")
        main_module.__dict__.update(globs)
        sys.modules["__main__"] = main_module
        exec(code, main_module.__dict__)
    except Enough:
        pass
    except BaseException as e:       # the run's outcome, reported by the parent
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        first = lines[0] if lines else ""
        result["error"] = f"{type(e).__name__}: {first}"
        result["traceback"] = traceback.format_exc()
    with open(out, "wb") as fh:
        pickle.dump(result, fh)


if __name__ == "__main__":
    main(*sys.argv[1:])
