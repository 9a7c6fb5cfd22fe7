"""What each entry of the AD table through tl.jit must give: ``"ok"``, or a named refusal
or a not-applicable reason from the explicit lists below (each with its reason).

An entry is ``(case, mode, backend, dtype)``. ``expected(...)`` returns the start of
the required result; the tests assert ``got.startswith(expected)``, so an entry not
listed here must compare equal to the eager transform and to JAX, and a listed one
must give exactly its outcome (a refusal that goes away shows up as a failure to
update this file, never as a silent pass).
"""
from __future__ import annotations

import numpy as np

_PYTREE_ROWS = ("dict_params", "dict_params_and_x", "tuple_params", "dict_of_tuple", "list_params",
                "value_and_grad_dict")

#: (case, mode) -> reason, in every dtype and backend: the mode does not apply
NOT_APPLICABLE = {
    **{(c, "vmap"): "the first argument is not a float array" for c in _PYTREE_ROWS + ("scalar_arg",)},
    **{(c, "hessian"): "pytree arguments" for c in _PYTREE_ROWS},
    **{(c, "hessian"): "not a scalar program"
       for c in ("has_aux", "value_and_grad_aux", "vjp_vector", "vjp_tuple_out", "vjp_aux")},
    ("scalar_arg", "hessian"): "not a scalar function of a float array",
}

#: (case, mode) -> (first argument point it applies from, reason): the mode does not apply there
NOT_APPLICABLE_FROM_POINT = {
    # the third point is an empty array, whose perturbed batch eager and compiled code refuse alike
    ("for_shape0_overwrite", "vmap"): (2, "refused alike"),
    # jacfwd (and so hessian) batch the jvp over a basis with vmap: the same empty-batch refusal
    ("for_shape0_overwrite", "forward"): (2, "refused alike"),
    ("for_shape0_overwrite", "hessian"): (2, "refused alike"),
}

_ALL = ("reverse", "forward", "vmap", "hessian")

#: (case, mode) -> reason, float32 only: eager and compiled code refuse alike, by name
# (softmax_xent reverse and arange_weights reverse/hessian were here: float32 arguments times
# integer or float64-free constants now keep float32 cotangents, tests/ad/test_promoted_dtypes.py;
# compare_where, global_array and the float64 scatter targets were here until float32 met float64
# as NumPy promotes it, tests/ad/test_float_promotion.py)
FLOAT32_REFUSED_ALIKE: dict = {}

#: (case, mode) -> the refusal, every backend and dtype
REFUSED: dict = {}
# (the Hessians of reductions and subscript_read were here: prod_others_grad, the second derivative
# of prod, had no StableHLO lowering; it is now a composite whose body, a division-free O(n^2)
# product of all others, compiles)

#: case names whose reverse-mode program uses a function IREE's llvm-cpu cannot link in
#: float64 (tanh, sin, cos, arctan2, fmod; measured): refused by name there. The other modes
#: also compute the primal, so ``argnums_neg1`` (whose gradient does not need its ``sin``) too.
IREE_F64_NO_LINK = frozenset((
    "assign_chain", "unary_math", "matmul_batched", "if_elif_else", "for_branch", "for_shape0_overwrite",
    "for_range_forms", "for_over_rows", "nested_loops", "call_helpers", "nested_closure", "higher_order",
    "grad_of_grad", "global_array", "setitem_slices", "write_argument", "dict_params", "dict_params_and_x",
    "tuple_params", "argnums_1", "argnums_2_0", "argnums_tuple1", "list_params", "rnn", "has_aux",
    "value_and_grad_aux", "value_and_grad_dict", "value_and_grad_loop", "vjp_vector", "vjp_aux"))
IREE_F64_NO_LINK_PRIMAL = IREE_F64_NO_LINK | {"argnums_neg1"}
#: measured: the hessian programs of these rows (jacfwd of the gradient, batched over a basis) do link
IREE_F64_LINKS_UNDER_HESSIAN = frozenset(("call_helpers", "argnums_1", "argnums_2_0", "argnums_neg1",
                                          "argnums_tuple1"))
#: case names that compute in float64 with float32 arguments too (a float64 global array promotes
#: them, as NumPy does): IREE's float64 link refusal above applies in float32 as well
IREE_F64_FROM_FLOAT32 = frozenset(("global_array",))
#: (case, mode) -> reason: refused by IREE's compiler itself (measured, iree-base-compiler 3.13)
IREE_REFUSED: dict = {}
# (the Hessian of while_in_for was here: IREE's stream partitioning refused the negative-index wrap
# of a for loop's index; the index of a non-negative range is not wrapped since, stablehlo_index.py)


def expected(name: str, mode: str, backend: str, dtype, limit=None) -> str:
    """The start of the result ``ad_modes.check`` must return for this entry, run at the
    first ``limit`` argument points (None: all)."""
    if (name, mode) in NOT_APPLICABLE:
        return "n/a: " + NOT_APPLICABLE[name, mode]
    if np.dtype(dtype) == np.float32 and (name, mode) in FLOAT32_REFUSED_ALIKE:
        return "n/a: "
    if (name, mode) in REFUSED:
        return "refused: " + REFUSED[name, mode]
    if backend == "iree" and (name, mode) in IREE_REFUSED:
        return "refused: " + IREE_REFUSED[name, mode]
    no_link = IREE_F64_NO_LINK if mode == "reverse" else IREE_F64_NO_LINK_PRIMAL
    if mode == "hessian":
        no_link = no_link - IREE_F64_LINKS_UNDER_HESSIAN
    computes_f64 = np.dtype(dtype) == np.float64 or name in IREE_F64_FROM_FLOAT32
    if backend == "iree" and computes_f64 and name in no_link:
        return "refused: IREE (llvm-cpu) cannot compile"      # at the first point, before any later n/a
    if (name, mode) in NOT_APPLICABLE_FROM_POINT:
        point, reason = NOT_APPLICABLE_FROM_POINT[name, mode]
        if limit is None or limit > point:
            return "n/a: " + reason
    return "ok"
