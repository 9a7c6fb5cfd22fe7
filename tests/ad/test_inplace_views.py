"""A name holding a NumPy view of an array sees a later in-place write into that array.

Regression: ``r = A[0]`` then ``A[0, 1] = 5.0`` left ``r`` holding the old row, so
``np.sum(r * x)`` came back as 5.25 with a wrong gradient where NumPy gives -0.75. Every live
view of the written array (basic indexing, ``.T``, ``np.transpose``, ``swapaxes``, ``expand_dims``,
``squeeze``, ``x[None]``, ``np.flip``, ``np.diagonal``, ``np.split``'s parts, ``reshape``/``ravel``
where NumPy's reshape is certainly a view) is now rebound to the same view of the new array,
transitively for views of views, also when the write is inside an ``if``, a ``for`` or a ``while``
and the view was taken before it, and when the write is made by a called function into its
argument. Copies (``.copy()``, ``np.array``, ``+a``, ``flatten``, advanced indexing, masks, a scalar
``A[i, j]``) are not rebound. Where the relation cannot be followed (a reshape whose layout is
unknown, a view chosen by an ``if`` on an array, a loop that also rebinds the array) the name is
refused where it is read, naming both arrays and the line of the write. A write into a global's
array (``G[0] = 5.0``), which NumPy would make for the caller too, is refused at the line.

Oracles: the plain NumPy function for the value, central differences for the gradient.
"""
import inspect

import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import FenceError

X = np.array([0.5, -1.0, 2.0])


def central_diff(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def check(f, x=X):
    value, grad = tl.value_and_grad(f)(x.copy())
    assert float(value) == pytest.approx(float(f(x.copy())), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(grad, central_diff(f, x), rtol=1e-6, atol=1e-6)


# -- views that follow a write into their base ----------------------------------------------------

def base_write(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]                # a view of A in NumPy
    A[0, 1] = 5.0           # NumPy: r sees this write
    return np.sum(r * x)


def slice_view(x):
    A = x * 2.0
    r = A[1:]
    A[2] = x[0] * 3.0
    return np.sum(r * x[:2])


def transpose_view(x):
    A = np.outer(x, x) + 0.0
    r = A.T
    A[0, 1] = 5.0 * x[1]
    return np.sum(r * np.arange(9.0).reshape(3, 3))


def np_transpose_view(x):
    A = np.outer(x, x) + 0.0
    r = np.transpose(A)
    A[1] = x
    return np.sum(r[0] * x)


def swapaxes_view(x):
    A = np.outer(x, x) + 0.0
    r = np.swapaxes(A, 0, 1)
    A[1] += x
    return np.sum(r[0] * x)


def view_of_a_view(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    s = r[1:]
    A[0, 2] = x[1] ** 2
    return np.sum(s * x[:2]) + np.sum(r)


def view_of_an_unnamed_view(x):
    A = np.stack([x, x]) * 1.0
    s = A[0][1:]
    A[0, 2] = x[1] ** 2
    return np.sum(s * x[:2])


def augassign_into_the_base(x):
    A = np.stack([x, x]) * 1.0
    r = A[1]
    A += x
    return np.sum(r * x)


def multiply_into_the_base(x):
    A = np.stack([x, x]) * 1.0
    r = A[1]
    A *= x
    return np.sum(r * x)


def augassign_into_a_row_of_the_base(x):
    A = np.stack([x, x]) * 1.0
    r = A[1, 1:]
    A[1] += x * x
    return np.sum(r * x[1:])


def write_in_an_if(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    if x[2] > 0:
        A[0, 1] = 5.0
    return np.sum(r * x)


def write_in_both_branches(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    if x[2] < 0:
        A[0, 1] = 5.0
    else:
        A[0, 0] = x[2]
    A[0, 2] = x[1] * 4.0            # after the `if`, r is still a view of A
    return np.sum(r * x)


def same_view_on_both_paths(x):
    A = np.stack([x, x]) * 1.0
    if x[0] > 0:
        r = A[0]
        A[1, 1] = 2.0
    else:
        r = A[0]
    A[0, 1] = 5.0
    return np.sum(r * x)


def view_on_the_only_path_that_goes_on(x):
    A = np.stack([x, x]) * 1.0
    if x[0] > 0:
        r = A[0]
    else:
        return 0.0
    A[0, 1] = 5.0
    return np.sum(r * x)


def same_view_in_a_tuple_on_both_paths(x):
    A = np.stack([x, x]) * 1.0
    if x[0] > 0:
        t = (A[0], 1.0)
    else:
        t = (A[0], 2.0)
    A[0, 1] = 5.0
    return np.sum(t[0] * x) * t[1]


def alias_written_in_a_branch_then_after(x):
    a = x * 1.0
    b = a
    if x[2] > 0:
        b[0] = 3.0
    b[1] = x[0] * 2.0               # a still names the same array after the `if`
    return np.sum(a * x)


def aliases_rebound_together_in_both_branches(x):
    A = np.stack([x, x]) * 1.0
    c = A
    b = A
    if x[0] > 0:
        A = A * 2.0
        b = A
        c = A
    else:
        A = A * 3.0
        c = A
        b = A
    c[0, 1] = 5.0
    return np.sum(A * x[0]) + np.sum(b[0] * x)


def view_of_a_view_across_an_if(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    s = r[1:]
    t = s
    if x[0] > 0:
        A[0, 0] = 9.0
    A[0, 2] = x[1] * 7.0
    return np.sum(s * x[:2]) + np.sum(t) + np.sum(r)


def write_in_a_for_loop(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    s = 0.0
    for i in range(3):
        s = s + np.sum(r)           # r sees the writes of the earlier trips
        A[0, i] = x[i] ** 2
    return s + np.sum(r * x)


def write_in_a_branch_in_a_loop(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    for i in range(3):
        if x[i] > 0:
            A[0, i] = x[i] ** 3
    return np.sum(r * x)


def write_in_a_while_loop(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    while np.sum(r) < 20.0:         # the condition reads the view too
        A[0, 1] += 1.0
    return np.sum(r * x)


def reshape_that_splits(x):
    A = x * 2.0
    r = A.reshape(3, 1)             # a view whatever the layout
    A[1] = 7.0
    return np.sum(r[:, 0] * x)


def reshape_of_a_contiguous_array(x):
    A = np.outer(x, x) * 1.0        # C-contiguous: reshape(-1) is a view
    r = A.reshape(-1)
    q = np.ravel(A)
    A[1, 1] = 7.0 * x[0]
    return np.sum(r[:3] * x) + r[4] + q[4] * x[2]


def new_axes(x):
    A = x * 1.0
    r = A[None]
    q = np.expand_dims(A, 1)
    B = x[None, :] * 1.0
    s = np.squeeze(B)
    A[0] = 3.0
    B[0, 1] = x[0] * x[2]
    return np.sum(r[0] * x) + np.sum(q[:, 0]) + np.sum(s * x)


def flip_and_diagonal(x):
    A = np.outer(x, x) * 1.0
    r = np.flip(A, 1)
    d = np.diagonal(A)
    A[1, 1] = 9.0 * x[2]
    A[0, 0] = 3.0
    return np.sum(r[1] * x) + np.sum(d * x)


def split_parts(x):
    A = np.stack([x, x]) * 1.0
    parts = np.split(A, 2)          # a list of views
    A[0, 1] = 5.0
    return np.sum(parts[0] * x)


def helper_writes_its_argument(A):
    A[0, 1] = A[0, 1] * 5.0


def call_writes_into_the_argument(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    helper_writes_its_argument(A)   # NumPy: A and its view r change
    return np.sum(r * x) + np.sum(A)


def copies_are_not_rebound(x):
    A = np.stack([x, x]) * 1.0
    B = np.array(A)                 # a copy in NumPy
    C = +A                          # a copy too
    A[0, 1] = 5.0
    return np.sum(B[0] * x) + np.sum(C[0] * x)


def write_into_a_flattened_copy(x):
    A = np.stack([x, x]) * 1.0
    B = A.flatten()                 # always a copy: writing into it leaves A alone
    B[1] = 5.0
    return np.sum(A[0] * x) + np.sum(B * np.arange(6.0))


VIEWS = [base_write, slice_view, transpose_view, np_transpose_view, swapaxes_view, view_of_a_view,
         view_of_an_unnamed_view, augassign_into_the_base, multiply_into_the_base,
         augassign_into_a_row_of_the_base, write_in_an_if, write_in_both_branches, same_view_on_both_paths,
         view_on_the_only_path_that_goes_on, same_view_in_a_tuple_on_both_paths,
         alias_written_in_a_branch_then_after, aliases_rebound_together_in_both_branches,
         view_of_a_view_across_an_if,
         write_in_a_for_loop, write_in_a_branch_in_a_loop, write_in_a_while_loop, reshape_that_splits,
         reshape_of_a_contiguous_array, new_axes, flip_and_diagonal, split_parts,
         call_writes_into_the_argument, copies_are_not_rebound, write_into_a_flattened_copy]


@pytest.mark.parametrize("f", VIEWS, ids=lambda f: f.__name__)
def test_a_view_sees_a_later_write_into_its_base(f):
    check(f)


def test_the_main_case_under_jit_and_vmap():
    assert float(base_write(X.copy())) == -0.75
    expected = central_diff(base_write, X)
    np.testing.assert_allclose(tl.jit(tl.grad(base_write))(X.copy()), expected, rtol=1e-6, atol=1e-6)
    xs = np.stack([X, 2.0 * X, -X])
    np.testing.assert_allclose(tl.vmap(tl.grad(base_write))(xs), np.stack([central_diff(base_write, r) for r in xs]),
                               rtol=1e-6, atol=1e-6)


# -- what must keep working: copies and the loop patterns that take a row and write the next ------

def previous_row_in_a_loop(x):
    X_ = np.zeros((4, 3))
    X_[0] = x
    for t in range(1, 4):
        prev = X_[t - 1]
        X_[t] = prev + 1.0 * x
    return np.sum(X_ * X_)


def previous_row_carried(x):
    X_ = np.zeros((4, 3))
    X_[0] = x
    prev = X_[0]
    for t in range(1, 4):
        X_[t] = prev * 0.5 + x
        prev = X_[t]
    return np.sum(X_) + np.sum(prev * x)


def copied_row(x):
    A = np.stack([x, x]) * 1.0
    row = A[0].copy()
    A[0, 1] = 5.0
    return np.sum(row * x) + np.sum(A)


def advanced_index_copies(x):
    A = np.stack([x, x]) * 1.0
    r = A[[0]]
    m = A[0][A[0] > 0]
    A[0, 1] = 5.0
    A[0, 2] = 7.0
    return np.sum(r * x) + np.sum(m)


def scalar_element_copies(x):
    A = np.stack([x, x]) * 1.0
    v = A[0, 1]
    A[0, 1] = 5.0
    return v * x[0] + np.sum(A)


@pytest.mark.parametrize("f", [previous_row_in_a_loop, previous_row_carried, copied_row, advanced_index_copies,
                               scalar_element_copies], ids=lambda f: f.__name__)
def test_copies_and_row_recurrences_keep_working(f):
    check(f)


# -- refused where tlaloc cannot follow the view -----------------------------------------------------

def reshape_of_an_unknown_layout(x):
    A = np.outer(x, x) * 1.0
    B = A.T * 1.0                   # F-ordered in NumPy: its reshape(-1) is a copy, not a view
    r = B.reshape(-1)
    B[1, 0] = 7.0
    return np.sum(r[:3] * x)        # <- refused


def view_chosen_by_an_if(x):
    A = np.stack([x, x]) * 1.0
    if x[0] > 0:
        r = A[0]
    else:
        r = A[1]
    A[0, 1] = 5.0
    return np.sum(r * x)            # <- refused


def view_or_new_array_chosen_by_an_if(x):
    A = np.stack([x, x]) * 1.0
    if x[0] > 0:
        r = A[0]
    else:
        r = np.zeros(3)
    A[0, 1] = 5.0
    return np.sum(r * x)            # <- refused


def rows_of_a_constant_array_chosen_by_an_if(x):
    C = np.zeros((2, 3))
    if x[0] > 0:
        r = C[0]
    else:
        r = C[1]
    C[0, 1] = x[1]
    return np.sum(r * x)            # <- refused


def loop_rebinds_and_writes(x):
    A = np.stack([x, x]) * 1.0
    r = A[0]
    for i in range(2):
        A[0, 0] += 1.0
        A = A * 2.0
    return np.sum(A) + np.sum(r)    # <- refused


def carried_view_written_then_read(x):
    X_ = np.zeros((4, 3))
    X_[0] = x
    prev = X_[0]
    s = 0.0
    for t in range(1, 4):
        X_[t] = X_[t - 1] * 0.5 + x
        X_[t - 1] = 0.0             # NumPy: prev (row t - 1) is zeroed
        s = s + np.sum(prev)        # <- refused
        prev = X_[t]
    return np.sum(X_) + s


def view_of_a_constant_array(x):
    A = np.zeros((2, 3))
    r = A[0]
    A[0, 1] = x[0]                  # <- refused
    return np.sum(r * x)


def call_in_a_loop_writes_into_the_argument(x):
    A = np.stack([x, x]) * 1.0
    for i in range(2):              # <- refused
        helper_writes_its_argument(A)
    return np.sum(A[0] * x)


@pytest.mark.parametrize("f, message", [
    (reshape_of_an_unknown_layout, r"`r` may share memory with `B` .*written in place at line \d+.*"
                                   r"reshape returns a view only of a contiguous array.*`r = B.reshape\(-1\).copy\(\)`"),
    (view_chosen_by_an_if, r"`r` may share memory with `A` .*written in place at line \d+.*"
                           r"depends on the path taken through an `if`"),
    (view_or_new_array_chosen_by_an_if, r"`r` may share memory with `A` .*depends on the path taken"),
    (rows_of_a_constant_array_chosen_by_an_if, r"`r` may share memory with `C` .*depends on the path taken"),
    (loop_rebinds_and_writes, r"`r` may share memory with `A` .*this loop also rebinds `A`.*`r = A\[0\].copy\(\)`"),
    (carried_view_written_then_read, r"`prev` may share memory with `X_` .*written in place at line \d+"),
    (view_of_a_constant_array, r"`A` and `r` share memory \(`r` is a view of `A`\), so NumPy's `r` would show "
                               r"this write.*`r = A\[0\].copy\(\)`"),
    (call_in_a_loop_writes_into_the_argument, r"`A` is changed in place inside this loop \(through another name "
                                              r"for it or a view of it, or by a call that writes into its argument"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_view_that_cannot_be_followed_is_refused_at_the_line(f, message):
    with pytest.raises(FenceError, match=rf"test_inplace_views\.py:\d+:\d+: {message}") as info:
        tl.grad(f)(X.copy())
    assert info.value.lineno == _marked_line(f)


# -- a write into a global's array ----------------------------------------------------------------------

G = np.zeros(3)


def write_into_a_global(x):
    G[0] = 5.0                      # <- refused
    return np.sum(G * x)


def write_into_a_view_of_a_global(x):
    r = G[:2]
    r[0] = x[0]                     # <- refused
    return np.sum(G * x)


def add_at_into_a_global(x):
    np.add.at(G, [0, 0], x[:2])     # <- refused
    return np.sum(G * x)


class Holder:
    def __init__(self):
        self.W = np.zeros(3)


HOLDER = Holder()


def write_into_an_objects_array(x):
    W = HOLDER.W
    W[0] = x[0]                     # <- refused
    return np.sum(W * x)


def nested_function_writes_the_enclosing_array(x):
    A = np.stack([x, x]) * 1.0

    def g():
        A[0, 1] = 5.0               # <- refused
    g()
    return np.sum(A[0] * x)


@pytest.mark.parametrize("f, message", [
    (write_into_a_global, r"`G` is an array from outside the function .*NumPy would change it in place, for "
                          r"the caller too"),
    (write_into_a_view_of_a_global, r"`r` is a view of the array `G` from outside the function"),
    (add_at_into_a_global, r"`G` is an array from outside the function"),
    (nested_function_writes_the_enclosing_array, r"`A` is an array from outside the function"),
    (write_into_an_objects_array, r"`W` is \(or shares memory with\) an array read from an object outside the "
                                  r"function"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_write_into_a_global_array_is_refused_at_the_line(f, message):
    with pytest.raises(FenceError, match=rf"test_inplace_views\.py:\d+:\d+: {message}") as info:
        tl.value_and_grad(f)(X.copy())
    assert info.value.lineno == _marked_line(f)
    assert not G.any() and not HOLDER.W.any()


def _marked_line(f):
    lines, start = inspect.getsourcelines(f)
    return start + next(i for i, line in enumerate(lines) if "# <- refused" in line)
