"""The reverse-mode table: (name, program, JAX twin, argument generator, argnums, mode).

Every row is checked by ``test_reverse_vs_jax.py`` against JAX (float64,
rtol 1e-10), against central differences (a second, AD-free oracle), and by
re-running the rendered module of its derivative on its own. The programs live
in the sibling ``programs_*.py`` modules (tlaloc reads their source).

Argument generators take a seeded ``numpy.random.Generator`` and return a list
of argument tuples. Where a program branches on values, the list sweeps both
sides of each branch point; where a loop's trip count depends on the argument,
the list varies it (including zero trips where the program allows).
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import Callable, Optional

import numpy as np

from . import programs_api as A
from . import programs_basic as B
from . import programs_calls as C
from . import programs_branch as IF
from . import programs_loops as K
from . import programs_while as W
from . import programs_state as S

MODES = ("grad", "value_and_grad", "grad_aux", "value_and_grad_aux", "vjp", "vjp_aux")


@dataclasses.dataclass(frozen=True)
class Case:
    """One row of the table.

    fn: the program under test; twin: its ``jax.numpy`` twin (JAX's oracle).
    points: ``rng -> [args, ...]``, each ``args`` a tuple of positional arguments.
    argnums: as in ``tl.grad`` (ignored for vjp, which differentiates every argument).
    mode: one of ``MODES``.
    extra: values the rendered module takes after the argument leaves
      (module-level arrays the program reads; they become graph inputs).
    fd: check against central differences too (False only where the program's
      derivative is by design not the function's, e.g. ``stop_gradient``).
    xfail: ``{check: reason}`` for known engine bugs, check in
      {"jax", "fd", "source", "*"}; each is asserted with ``strict=True``.
    """
    name: str
    fn: Callable
    twin: Callable
    points: Callable[[np.random.Generator], list]
    argnums: object = 0
    mode: str = "grad"
    extra: tuple = ()
    fd: bool = True
    xfail: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        assert self.mode in MODES, self.mode

    def args_list(self) -> list:
        """The argument tuples, from a generator seeded by the case's name."""
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        return self.points(rng)

    def xfail_reason(self, check: str) -> Optional[str]:
        return self.xfail.get(check) or self.xfail.get("*")


# -- argument generators ------------------------------------------------------------

def randn(r, *shape):
    return r.standard_normal(shape)


def away(r, *shape, lo=0.2):
    """Normal draws pushed at least ``lo`` away from 0 (for abs, sign, branches at 0)."""
    x = r.standard_normal(shape)
    return np.where(x >= 0, x + lo, x - lo)


def pos(r, *shape, lo=0.1):
    return np.abs(r.standard_normal(shape)) + lo


def scalar(v):
    return np.array(v, dtype=np.float64)


def _elif_points(r):
    """x, w with t = x @ w set to each region of f_if_elif_else (t > 1, -1 < t <= 1, t <= -1)."""
    out = []
    for target in (2.0, 0.3, -0.4, -3.0):
        x, w = randn(r, 3), randn(r, 3)
        out.append((x, w * (target / (x @ w))))
    return out


def _nested_if_points(r):
    p, n = pos(r, 4), -pos(r, 4)
    n_lo = n.copy()
    n_lo[0] = -5.0                      # x.sum() <= 0 and x[0] < y[0]
    n_hi = n.copy()
    n_hi[0] = -0.05                     # x.sum() <= 0 and x[0] > y[0] (y negative, big)
    return [(p, pos(r, 4)), (p, -pos(r, 4)), (n_lo, randn(r, 4)), (n_hi, -pos(r, 4, lo=1.0))]


def _onehot(r, n, c):
    return np.eye(c)[r.integers(0, c, n)]


def _mlp_params(r, d=3, h=4):
    return {"w1": randn(r, d, h), "b1": randn(r, h), "w2": randn(r, h), "b2": scalar(r.standard_normal())}


def _arr(*v):
    return np.array(v, dtype=np.float64)


# -- known engine bugs: none open. Fixed ones are regression cases in the table: addat_fancy_repeated
# (NumPy's buffered `a[idx] += v`), the vjp cases' source check (tl.source(vjp_fn)) and list_params'
# source check (tl.source shows the module of the most recent call).


# -- the table ---------------------------------------------------------------------------

CASES: list[Case] = [
    # straight-line: assignment, augmented assignment, unpacking, arithmetic
    Case("assign_chain", B.f_assign_chain, B.j_assign_chain,
         lambda r: [(randn(r, 4, 3), randn(r, 3)), (randn(r, 2, 5), randn(r, 5))], argnums=(0, 1)),
    Case("augassign", B.f_augassign, B.j_augassign, lambda r: [(randn(r, 5), randn(r, 5))], argnums=(0, 1)),
    Case("tuple_unpack", B.f_tuple_unpack, B.j_tuple_unpack, lambda r: [(randn(r, 5), randn(r, 5))],
         argnums=(0, 1)),
    Case("arith_pow_div", B.f_arith, B.j_arith, lambda r: [(randn(r, 6), randn(r, 6))], argnums=(0, 1)),
    Case("unary_math", B.f_unary_math, B.j_unary_math, lambda r: [(away(r, 7),)]),
    Case("compare_where", B.f_compare_where, B.j_compare_where, lambda r: [(randn(r, 8), randn(r, 8))],
         argnums=(0, 1)),
    Case("max_min_noties", B.f_max_min_noties, B.j_max_min_noties, lambda r: [(away(r, 8), randn(r, 8))],
         argnums=(0, 1)),
    # broadcasting, reductions, matmul
    Case("broadcast_keepdims", B.f_broadcast_keepdims, B.j_broadcast_keepdims,
         lambda r: [(randn(r, 4, 3), randn(r, 3), randn(r, 4, 1))], argnums=(0, 1, 2)),
    Case("reductions", B.f_reductions, B.j_reductions, lambda r: [(randn(r, 4, 3),)]),
    Case("softmax_xent", B.f_softmax_xent, B.j_softmax_xent, lambda r: [(randn(r, 5, 4), _onehot(r, 5, 4))]),
    Case("matmul_1d", B.f_matmul_1d, B.j_matmul_1d, lambda r: [(randn(r, 4), randn(r, 4, 3), randn(r, 3))],
         argnums=(0, 1, 2)),
    Case("matmul_batched", B.f_matmul_batched, B.j_matmul_batched,
         lambda r: [(randn(r, 2, 3, 4), randn(r, 4, 5))], argnums=(0, 1)),
    # subscripts
    Case("subscript_read", B.f_subscript_read, B.j_subscript_read, lambda r: [(randn(r, 5, 4),)]),
    Case("gather_repeated", B.f_gather_repeated, B.j_gather_repeated,
         lambda r: [(randn(r, 4), np.array([0, 2, 2, 3, 0, 0]), randn(r, 6))], argnums=(0, 2)),
    Case("shape_ops", B.f_shape_ops, B.j_shape_ops, lambda r: [(randn(r, 3, 4),)]),
    Case("scalar_arg", B.f_scalar_arg, B.j_scalar_arg, lambda r: [(scalar(0.3), randn(r, 4))], argnums=(0, 1)),
    Case("tnp_library", B.f_tnp_library, B.j_tnp_library, lambda r: [(randn(r, 4, 3), randn(r, 3))],
         argnums=(0, 1)),
    Case("stop_gradient", B.f_stop_gradient, B.j_stop_gradient, lambda r: [(randn(r, 5),)], fd=False),
    Case("arange_weights", B.f_arange_weights, B.j_arange_weights, lambda r: [(randn(r, 5),), (randn(r, 2),)]),

    # if / elif / else, both sides of each branch point
    Case("if_else", IF.f_if_else, IF.j_if_else, lambda r: [(pos(r, 5),), (-pos(r, 5),)]),
    Case("if_elif_else", IF.f_if_elif_else, IF.j_if_elif_else, _elif_points, argnums=(0, 1)),
    Case("if_no_else", IF.f_if_no_else, IF.j_if_no_else, lambda r: [(_arr(1.0, 0.5, -2.0),), (_arr(0.5, 1.0, -2.0),)]),
    Case("nested_if", IF.f_nested_if, IF.j_nested_if, _nested_if_points, argnums=(0, 1)),
    Case("if_boolops", IF.f_if_boolops, IF.j_if_boolops,
         lambda r: [(_arr(*v),) for v in ((0.5, 0.7), (-0.8, 0.3), (0.2, -2.0), (0.2, -0.5), (0.7, -0.5),
                                          (-0.3, 0.4))]),
    Case("if_ifexp", IF.f_if_ifexp, IF.j_if_ifexp, lambda r: [(pos(r, 4),), (-pos(r, 4),)]),
    # for over range() with data-dependent trip counts
    Case("for_branch", K.f_for_branch, K.j_for_branch,
         lambda r: [(randn(r, 4, 3), randn(r, 3)), (randn(r, 7, 2), randn(r, 2))], argnums=(0, 1)),
    Case("for_shape0_overwrite", K.f_for_shape0_overwrite, K.j_for_shape0_overwrite,
         lambda r: [(0.5 * randn(r, 4), randn(r, 3)), (0.5 * randn(r, 1), randn(r, 3)),
                    (np.zeros(0), randn(r, 3))], argnums=(0, 1)),
    Case("for_range_forms", K.f_for_range_forms, K.j_for_range_forms,
         lambda r: [(randn(r, 7),), (randn(r, 4),), (randn(r, 1),)]),
    Case("for_over_rows", K.f_for_over_rows, K.j_for_over_rows, lambda r: [(randn(r, 4, 3), randn(r, 3))],
         argnums=(0, 1)),
    Case("nested_loops", K.f_nested_loops, K.j_nested_loops, lambda r: [(randn(r, 3, 4), randn(r, 4))],
         argnums=(0, 1)),
    Case("loop_static_unrolled", K.f_loop_static_unrolled, K.j_loop_static_unrolled, lambda r: [(randn(r, 4),)]),
    # while with value-dependent conditions
    Case("while_value", W.f_while_value, W.j_while_value,
         lambda r: [(_arr(1.3, 0.8),), (_arr(0.4, 2.1),), (_arr(3.0, 4.0),)]),
    Case("while_counter_index", W.f_while_counter_index, W.j_while_counter_index,
         lambda r: [(_arr(0.5, -1.0, 0.3),), (_arr(0.9, 0.2, -0.7, 1.1),)]),
    Case("while_nonlinear_carry", W.f_while_nonlinear_carry, W.j_while_nonlinear_carry,
         lambda r: [(_arr(1.5, 0.5),), (_arr(3.0, -1.0),), (_arr(-1.5, 3.0),), (_arr(60.0, 1.0),)]),
    Case("while_break", W.f_while_break, W.j_while_break,
         lambda r: [(_arr(1.0, 0.5),), (_arr(0.1, -0.5),)]),
    # break, continue, return anywhere
    Case("for_break", K.f_for_break, K.j_for_break,
         lambda r: [(_arr(0.5, 1.2, -0.3, 2.0),), (pos(r, 5),), (_arr(-0.4, 1.0),)]),
    Case("for_continue", K.f_for_continue, K.j_for_continue, lambda r: [(away(r, 6), away(r, 6))], argnums=(0, 1)),
    Case("return_in_branch", K.f_return_in_branch, K.j_return_in_branch,
         lambda r: [(_arr(0.5, 1.0, -2.0),), (_arr(-0.5, 2.0, 1.0),), (_arr(-0.5, 0.2, 0.1),)]),
    Case("return_in_loop", K.f_return_in_loop, K.j_return_in_loop,
         lambda r: [(_arr(0.5, -0.2, 1.5, 3.0),), (_arr(0.5, -0.2, 0.9),)]),
    Case("return_in_loop_acc", K.f_return_in_loop_acc, K.j_return_in_loop_acc,
         lambda r: [(_arr(0.5, 1.2, 1.0, 3.0),), (_arr(0.5, -0.2, 0.9),)]),
    Case("return_in_while", W.f_return_in_while, W.j_return_in_while,
         lambda r: [(_arr(1.0, 0.5),), (_arr(1.0, -5.0),)]),
    # logsumexp by loops + if, and the running max on its own (non-zero gradients)
    Case("logsumexp_loop", K.f_logsumexp_loop, K.j_logsumexp_loop,
         lambda r: [(3.0 * randn(r, 5),), (_arr(4.0, 1.0, -2.0),), (_arr(0.7),)]),
    Case("running_max_only", K.f_running_max_only, K.j_running_max_only,
         lambda r: [(randn(r, 6),), (_arr(3.0, -1.0, 2.0),), (_arr(1.0, -1.0, 2.5),)]),

    # combinations
    Case("while_in_for", W.f_while_in_for, W.j_while_in_for,
         lambda r: [(_arr(0.5, 1.2, 2.5),), (_arr(0.3, 3.0),)]),
    Case("for_elem_break", K.f_for_elem_break, K.j_for_elem_break,
         lambda r: [(_arr(0.5, 1.2, -2.5, 3.0),), (_arr(0.5, -0.7, 1.1),)]),
    Case("return_nested_loops", K.f_return_nested_loops, K.j_return_nested_loops,
         lambda r: [(np.array([[0.5, 0.2, -0.3], [3.0, 2.0, 0.1]]),), (0.3 * randn(r, 3, 2),)]),
    Case("break_continue_mix", K.f_break_continue_mix, K.j_break_continue_mix,
         lambda r: [(_arr(0.5, -0.3, 1.2, -2.0, 0.7), _arr(0.4, 0.9, 0.2)),
                    (_arr(0.5, -0.3, 0.2), _arr(0.4, -0.9, 0.2, 0.6))], argnums=(0, 1)),
    Case("tuple_carry", K.f_tuple_carry, K.j_tuple_carry, lambda r: [(randn(r, 4),), (randn(r, 2),)]),
    Case("last_after_loop", K.f_last_after_loop, K.j_last_after_loop, lambda r: [(randn(r, 4),), (randn(r, 1),)]),
    Case("branch_tuple", IF.f_branch_tuple, IF.j_branch_tuple, lambda r: [(pos(r, 4),), (-pos(r, 4),)]),
    Case("while_array_carry", W.f_while_array_carry, W.j_while_array_carry,
         lambda r: [(_arr(0.5, 1.2, 0.7),), (_arr(2.0, 1.0, 0.3, 0.1),), (_arr(5.0, 4.0, 3.0),)]),

    # calls, nested functions, closures
    Case("call_helpers", C.f_call_helpers, C.j_call_helpers, lambda r: [(randn(r, 5), randn(r, 5))],
         argnums=(0, 1)),
    Case("call_in_loop_branch", C.f_call_in_loop_branch, C.j_call_in_loop_branch, lambda r: [(randn(r, 7),)]),
    Case("nested_closure", C.f_nested_closure, C.j_nested_closure,
         lambda r: [(randn(r, 4), 0.3 * randn(r, 3))], argnums=(0, 1)),
    Case("closure_late_binding", C.f_closure_late_binding, C.j_closure_late_binding, lambda r: [(randn(r, 4),)]),
    Case("closure_in_loop", C.f_closure_in_loop, C.j_closure_in_loop, lambda r: [(away(r, 6),)]),
    Case("higher_order", C.f_higher_order, C.j_higher_order, lambda r: [(randn(r, 4),)]),
    Case("loop_var_closure", C.f_loop_var_closure, C.j_loop_var_closure, lambda r: [(randn(r, 5),)]),
    Case("builtins_on_arrays", C.f_builtins_on_arrays, C.j_builtins_on_arrays,
         lambda r: [(_arr(-0.5, 1.2, -2.5),), (_arr(0.7, -1.2, 2.5),)]),
    Case("early_return_helper_in_loop", C.f_early_return_helper_in_loop, C.j_early_return_helper_in_loop,
         lambda r: [(_arr(0.2, 0.6, 0.9, 1.1),), (_arr(-0.4, 0.7, 0.2),)]),
    Case("grad_of_grad", C.f_grad_of_grad, C.j_grad_of_grad, lambda r: [(randn(r, 5),), (_arr(0.5, -1.2, 0.7),)]),
    Case("global_array", C.f_global_array, C.j_global_array, lambda r: [(randn(r, 3),)], extra=(C.W_GLOBAL,)),

    # subscript assignment and a[i] += v (functional semantics)
    Case("setitem_loop", S.f_setitem_loop, S.j_setitem_loop, lambda r: [(randn(r, 5), randn(r, 5))],
         argnums=(0, 1)),
    Case("addat_repeated", S.f_addat_repeated, S.j_addat_repeated,
         lambda r: [(randn(r, 6), np.array([0, 2, 2, 1, 0, 2]))]),
    Case("augassign_ops_subscript", S.f_augassign_ops_subscript, S.j_augassign_ops_subscript,
         lambda r: [(randn(r, 5),)]),
    Case("setitem_slices", S.f_setitem_slices, S.j_setitem_slices, lambda r: [(randn(r, 4, 3), randn(r, 3))],
         argnums=(0, 1)),
    Case("write_argument", S.f_write_argument, S.j_write_argument, lambda r: [(randn(r, 4),)]),
    Case("setitem_in_branch", S.f_setitem_in_branch, S.j_setitem_in_branch, lambda r: [(away(r, 6), randn(r, 6))],
         argnums=(0, 1)),
    Case("setitem_fancy_repeated", S.f_setitem_fancy_repeated, S.j_setitem_fancy_repeated,
         lambda r: [(randn(r, 5), np.array([0, 2, 2, 1, 2]))]),
    Case("addat_fancy_repeated", S.f_addat_fancy_repeated, S.j_addat_fancy_repeated,
         lambda r: [(randn(r, 5), np.array([0, 2, 2, 1, 2]))]),
    Case("setitem_2d_loops", S.f_setitem_2d_loops, S.j_setitem_2d_loops, lambda r: [(randn(r, 3, 4), randn(r, 4))],
         argnums=(0, 1)),
    Case("alias_write", S.f_alias_write, S.j_alias_write, lambda r: [(randn(r, 3),)]),

    # pytree arguments, argnums, has_aux, value_and_grad, vjp
    Case("dict_params", A.f_mlp_dict, A.j_mlp_dict, lambda r: [(_mlp_params(r), randn(r, 5, 3), randn(r, 5))]),
    Case("dict_params_and_x", A.f_mlp_dict, A.j_mlp_dict,
         lambda r: [(_mlp_params(r), randn(r, 5, 3), randn(r, 5))], argnums=(0, 1)),
    Case("tuple_params", A.f_tuple_params, A.j_tuple_params,
         lambda r: [((randn(r, 3, 2), (randn(r, 2), scalar(1.5))), randn(r, 4, 3))]),
    Case("dict_of_tuple", A.f_dict_of_tuple, A.j_dict_of_tuple,
         lambda r: [({"layer": (randn(r, 3), scalar(0.2)), "scale": scalar(2.0)}, randn(r, 4, 3))],
         argnums=(0, 1)),
    Case("argnums_1", A.f_three_args, A.j_three_args, lambda r: [(randn(r, 3), randn(r, 3), randn(r, 3))],
         argnums=1),
    Case("argnums_2_0", A.f_three_args, A.j_three_args, lambda r: [(randn(r, 3), randn(r, 3), randn(r, 3))],
         argnums=(2, 0)),
    Case("argnums_neg1", A.f_three_args, A.j_three_args, lambda r: [(randn(r, 3), randn(r, 3), randn(r, 3))],
         argnums=-1),
    Case("argnums_tuple1", A.f_three_args, A.j_three_args, lambda r: [(randn(r, 3), randn(r, 3), randn(r, 3))],
         argnums=(1,)),
    Case("unused_argument", A.f_unused_argument, A.j_unused_argument, lambda r: [(randn(r, 3), randn(r, 2, 2))],
         argnums=(0, 1)),
    Case("constant_branch", A.f_constant_branch, A.j_constant_branch, lambda r: [(pos(r, 3),), (-pos(r, 3),)]),
    Case("list_params", A.f_list_params, A.j_list_params, lambda r: [([randn(r, 3, 4), randn(r, 4)], randn(r, 5, 3))],
         argnums=(0, 1)),
    Case("rnn", A.f_rnn, A.j_rnn, lambda r: [(0.5 * randn(r, 4, 4), randn(r, 4, 3), randn(r, 4), randn(r, 5, 3)),
                                             (0.5 * randn(r, 2, 2), randn(r, 2, 3), randn(r, 2), randn(r, 1, 3))],
         argnums=(0, 1, 2, 3)),
    Case("has_aux", A.f_loss_with_aux, A.j_loss_with_aux, lambda r: [(randn(r, 3), randn(r, 4, 3))],
         mode="grad_aux"),
    Case("value_and_grad_aux", A.f_loss_with_aux, A.j_loss_with_aux, lambda r: [(randn(r, 3), randn(r, 4, 3))],
         argnums=(0, 1), mode="value_and_grad_aux"),
    Case("value_and_grad_dict", A.f_mlp_dict, A.j_mlp_dict,
         lambda r: [(_mlp_params(r), randn(r, 5, 3), randn(r, 5))], mode="value_and_grad"),
    Case("value_and_grad_loop", K.f_for_branch, K.j_for_branch,
         lambda r: [(randn(r, 4, 3), randn(r, 3)), (randn(r, 6, 3), randn(r, 3))], argnums=1,
         mode="value_and_grad"),
    Case("vjp_vector", A.f_vjp_vector, A.j_vjp_vector, lambda r: [(randn(r, 3), randn(r, 4, 3))], mode="vjp"),
    Case("vjp_tuple_out", A.f_vjp_tuple_out, A.j_vjp_tuple_out, lambda r: [(randn(r, 3), randn(r, 4, 3))],
         mode="vjp"),
    Case("vjp_aux", A.f_vjp_aux, A.j_vjp_aux, lambda r: [(randn(r, 5),)], mode="vjp_aux"),
]

BY_NAME = {c.name: c for c in CASES}
assert len(BY_NAME) == len(CASES), "case names must be unique"
