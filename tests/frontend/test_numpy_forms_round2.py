"""NumPy forms from the second round of new users' and adversarial programs (session 16).

Silently wrong before: ``b.sort()`` (in place) was dropped, the code went on with ``b`` unsorted;
``np.polynomial.polynomial.polyval(x, c)`` ran as ``np.polyval(x, c)`` (other argument order and
coefficient order), ``np.emath.sqrt`` as the real ``np.sqrt``: NumPy functions of other modules
are now refused by name. Refused or crashing before: ``(x < 0) | (x > 1)`` and ``m |= ...``,
zero-argument ``super()``, ``reversed(range(len(r)))``, ``lst.sort(key=lambda ...)``,
``int(np.argmax(d))``, ``a.flatten('F')``, ``np.unstack``, ``np.einsum('...i,...i->...')`` under
tl.jit, windows ``x[i - 1:i + 2]`` and ``x[i:i + 6:2]`` under tl.jit / tl.vmap, closures over a
traced default, a traced ``functools.partial`` or an object made in the enclosing function inside
a nested transform, a function argument to tl.hessian, a str inside a jitted pytree.

Oracle: JAX float64 on the same programs (or NumPy's own values); control: sorting changes the
result (the data is not sorted to begin with).
"""
import functools

import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import ArgumentError, FenceError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

A = np.array([3.0, 1.0, 4.0, 2.0])
R = np.array([1.0, 0.5, 2.0, -1.0])
X = np.linspace(0.1, 1.2, 7)


def _close(got, want, rtol=1e-13):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=1e-14)


def sort_in_place(a):
    b = a * 1.0
    c = b
    b.sort()
    return np.sum(c * np.arange(4.0))


@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_sort_in_place(wrap):
    want = jax.grad(lambda a: jnp.sum(jnp.sort(a) * jnp.arange(4.0)))(A)
    _close(wrap(tl.grad(sort_in_place))(A), want)
    assert float(tl.jit(sort_in_place)(A)) == sort_in_place(A) == 20.0      # unsorted would be 15
    with pytest.raises(FenceError, match="changes the array in place and returns None"):
        tl.grad(lambda a: np.sum((a * 1.0).sort()))(A)


def test_functions_of_other_numpy_modules_are_refused_by_name():
    c, x = np.array([0.1, 0.2, -0.3, 0.4]), np.linspace(-1, 1, 5)
    with pytest.raises(FenceError, match="numpy.polynomial.polynomial.polyval` has no tlaloc equivalent"):
        tl.jit(lambda c, x: np.sum(np.polynomial.polynomial.polyval(x, c) ** 2))(c, x)
    with pytest.raises(FenceError, match="sqrt` has no tlaloc equivalent"):
        tl.jit(lambda c: np.emath.sqrt(c))(c)


def masks(x, xp=np):
    m = (x < 0.3) | (x > 1.0)
    k = (x > 0.2) & ~(x > 0.9)
    return xp.sum(xp.where(m, x ** 2, 0.0)) + xp.sum(xp.where(k ^ m, x, 0.0)) + (x.shape[0] & 1)


def discounted(r, xp=np):
    g, total = 0.0, 0.0
    for t in reversed(range(len(r))):
        g = r[t] + 0.9 * g
        total = total + g ** 2
    return total


def second_difference(x, xp=np):
    acc = 0.0
    for i in range(1, len(x) - 1):
        acc = acc + xp.sum(x[i - 1:i + 2] * xp.array([1.0, -2.0, 1.0])) ** 2
    for i in range(2):
        acc = acc + xp.sum(x[i:i + 6:2] ** 2)
    return acc


def ellipsis(x, xp=np):
    a = xp.reshape(x[:6], (2, 3))
    return xp.sum(xp.einsum("...i,...i->...", a, a) ** 2) + xp.sum(xp.einsum("i...->...", a))


@pytest.mark.parametrize("f", [masks, discounted, second_difference, ellipsis], ids=lambda f: f.__name__)
@pytest.mark.parametrize("wrap", [lambda f: f, tl.jit], ids=["eager", "jit"])
def test_programs_against_jax(f, wrap):
    _close(wrap(tl.grad(f))(X), jax.grad(lambda x: f(x, jnp))(X))
    assert float(tl.jit(f)(X)) == pytest.approx(float(f(X)), rel=1e-13)


def test_vmap_of_windows():
    xs = np.stack([X, -X, 2 * X])
    _close(tl.vmap(tl.grad(second_difference))(xs), jax.vmap(jax.grad(lambda x: second_difference(x, jnp)))(xs))


class Base:
    def __init__(self, w):
        self.w = w

    def energy(self, x):
        return np.sum(self.w * x ** 2)


class Child(Base):
    def __init__(self, w, s):
        super().__init__(w)
        self.s = s

    def energy(self, x):
        return super().energy(x) * self.s


def test_python_forms():
    np.testing.assert_array_equal(tl.grad(lambda w, x: Child(w, 3.0).energy(x))(np.ones(2), R[:2]), 3 * R[:2] ** 2)
    np.testing.assert_array_equal(tl.jit(tl.grad(Child(np.ones(2), 2.0).energy))(R[:2]), 4 * R[:2])

    def keyed(x):
        pairs = [(x[0], 2.0), (x[1], 1.0)]
        pairs.sort(key=lambda p: p[1])
        return pairs[0][0] * 2 + pairs[1][0]

    np.testing.assert_array_equal(tl.grad(keyed)(R), [1.0, 2.0, 0.0, 0.0])
    np.testing.assert_array_equal(tl.grad(lambda x: x[int(np.argmax(x))] * 2)(R), [0.0, 0.0, 2.0, 0.0])
    m = np.arange(4.0).reshape(2, 2)
    np.testing.assert_array_equal(tl.grad(lambda a: np.sum(a.flatten("F") * np.arange(4.0)))(m), [[0, 2], [1, 3]])
    np.testing.assert_array_equal(tl.grad(lambda a: np.sum(np.unstack(a)[0] * 2))(m), [[2, 2], [0, 0]])


def test_nested_transforms_capture_defaults_partials_and_objects():
    def loss(p, b):
        return np.sum(p * b)

    def with_partial(p):
        return np.sum(tl.grad(functools.partial(loss, b=p * 3))(p))

    def with_default(p):
        a = p * 3

        def h(q, a=a):
            return np.sum(q * a)
        return np.sum(tl.grad(h)(p))

    class Model:
        def __init__(self, w):
            self.w = w

        def __call__(self, z):
            return self.w * z

    def with_object(x):
        m = Model(x * 2)
        return np.sum(tl.grad(lambda z: np.sum(m(z) ** 2))(x))

    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(tl.grad(with_partial)(x), [3.0, 3.0])
    np.testing.assert_array_equal(tl.grad(with_default)(x), [3.0, 3.0])
    np.testing.assert_allclose(tl.grad(with_object)(x), 24 * x ** 2, rtol=1e-15)


def test_function_arguments_to_hessian_and_strings_in_jitted_pytrees():
    def kern(a, b, ell):
        return np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2 / ell ** 2)

    def nll(theta, x, y, kernel):
        k = kernel(x, x, np.exp(theta[0])) + np.exp(theta[1]) * np.eye(len(x))
        return 0.5 * y @ np.linalg.solve(k, y) + 0.5 * np.linalg.slogdet(k)[1]

    x = np.linspace(0, 1, 5)
    th = np.array([-1.0, -2.0])
    h = tl.hessian(nll)(th, x, np.sin(3 * x), kern)
    eps = 1e-5
    fd = np.array([(tl.grad(nll)(th + eps * e, x, np.sin(3 * x), kern) - tl.grad(nll)(th - eps * e, x, np.sin(3 * x), kern))
                   / (2 * eps) for e in np.eye(2)])
    np.testing.assert_allclose(h, fd, rtol=1e-6)
    with pytest.raises(ArgumentError, match="is inside an argument's structure"):
        tl.jit(lambda p: np.sum(p["w"]))({"w": np.ones(2), "n": "a"})


def test_max_min_sorted_of_numbers_computed_here():
    """Regression: max([a, b]) / sorted([...]) of 0-d values were refused ("the builtin `max` cannot
    take an array"). Oracle: JAX on the same order statistics."""
    x = np.array([0.3, -1.2, 2.0])

    def f(x, xp=np):
        items = [x[0] * 2, x[1] ** 2, x[2]]
        if xp is np:
            return max(items) + min(items) + sorted(items)[1] * 3 + sorted(items, reverse=True)[0]
        s = xp.sort(xp.stack(items))
        return xp.max(s) + xp.min(s) + s[1] * 3 + s[-1]

    np.testing.assert_allclose(tl.grad(f)(x), np.asarray(jax.grad(lambda x: f(x, jnp))(x)), rtol=1e-15)


def test_ufunc_out_writes_in_place():
    """Regression: ``np.multiply(b, 2, out=b)`` was refused ("unexpected keyword argument 'out'").
    NumPy writes into ``b`` (and every name bound to it sees the write); oracle: NumPy itself and JAX."""
    def f(x):
        b = x * 1.0
        c = b
        np.multiply(b, 2, out=b)
        np.exp(b, out=b)
        r = np.add(b, 1.0, out=b)
        return np.sum(c * r)

    x = np.array([0.3, -1.2, 2.0])
    value, g = tl.value_and_grad(f)(x)
    assert float(value) == pytest.approx(f(x.copy()), rel=1e-15)
    np.testing.assert_allclose(g, np.asarray(jax.grad(lambda x: jnp.sum((jnp.exp(2 * x) + 1) ** 2))(x)), rtol=1e-14)
    assert float(tl.jit(f)(x)) == pytest.approx(f(x.copy()), rel=1e-15)


def test_and_or_return_an_operand_as_python_does():
    """Regression (round 3): ``a or b`` / ``a and b`` on computed values returned True/False (and a zero
    gradient), where Python returns one of the operands. Oracle: plain Python/NumPy and the gradient
    of the operand it picks."""
    x = np.array([-0.3, 0.5, 0.7, -0.6])
    cases = [
        (lambda x: (x[0] > 0) & (x[1] > 0) and 1.0 * x[2] or 2.0 * x[3], [0, 0, 0, 2.0]),
        (lambda x: x[0] * 0 or x[3], [0, 0, 0, 1.0]),
        (lambda x: x[0] and x[3], [0, 0, 0, 1.0]),
    ]
    for f, grad in cases:
        assert float(tl.jit(f)(x)) == f(x)
        np.testing.assert_array_equal(tl.grad(f)(x), grad)
    assert bool(tl.jit(lambda x: (x[1] > 0) and (x[2] > 0))(x)) is True


def test_digitize_with_decreasing_edges():
    bins, x = np.array([1.0, 0.5, 0.0, -1.0]), np.array([-2.0, -0.5, 0.2, 0.7, 3.0])
    for right in (False, True):
        want = np.digitize(x, bins, right=right)
        np.testing.assert_array_equal(np.asarray(tl.jit(lambda x: np.digitize(x, bins, right=right))(x)), want)
        np.testing.assert_array_equal(np.asarray(tl.jit(lambda x, b: np.digitize(x, b, right=right))(x, bins)), want)


def test_int_of_a_computed_index_and_a_masked_update_by_an_argument():
    x = np.array([0.3, -1.2, 2.0, 0.5])

    def pick(x):
        return x[int(np.argmin(x))] * 2 + x[int(np.sum(x > 0))]

    assert float(tl.jit(pick)(x)) == pick(x)
    np.testing.assert_array_equal(np.asarray(tl.vmap(pick)(np.stack([x, -x]))), [pick(x), pick(-x)])
    np.testing.assert_array_equal(tl.jacrev(pick)(x), [0.0, 2.0, 0.0, 1.0])

    def scaled(y, c):
        y = y * 1.0
        y[y > 1] *= c
        return np.sum(y ** 2)

    assert float(tl.jit(scaled)(x, 1.7)) == pytest.approx(scaled(x, 1.7), rel=1e-15)
