"""Functions outside the supported language, each refused by tl.grad at a known place.

The tests read the expected line of each construct from the marker comment on it.
"""
import contextlib

import numpy as np
import scipy.special


def uses_with(x):
    with contextlib.suppress(Exception):  # REFUSE: with
        y = x * 2
    return y.sum()


def uses_try(x):
    try:  # REFUSE: try
        y = x * 2
    except ValueError:
        y = x
    return y.sum()


def uses_global(x):
    global _G  # REFUSE: global
    return x.sum()


def uses_foreign_function(x):
    return scipy.special.gammainc(2.0, x).sum()  # REFUSE: foreign


def uses_print(x):
    if x.sum() > 0:
        print(x)  # REFUSE: print
    return x.sum()


def recursive(x):
    if x.sum() > 1:
        return recursive(x / 2)  # REFUSE: recursion
    return x.sum()


def uses_attribute_store(x):
    o = np.zeros(3)
    o.flags = x  # REFUSE: attribute store
    return x.sum()


def uses_del(x):
    y = x * 2
    if x.sum() > 0:
        del y  # REFUSE: del
    return x.sum()


def uses_set_comprehension(x):
    s = {i for i in range(3)}  # REFUSE: setcomp
    return x.sum()


def uses_float_on_array(x):
    # float of one number is that number (tests/ad/test_math_module.py); of several, refused as Python refuses it
    return float(np.ones(2) * x.sum()) * 2  # REFUSE: float


def uses_generator(x):
    yield x  # REFUSE: yield


def uses_unknown_numpy(x):
    return np.unwrap(x).sum()  # REFUSE: numpy without equivalent


def uses_class(x):
    class Inner:  # REFUSE: class
        pass
    return x.sum()


def uses_match(x):
    match 1:  # REFUSE: match
        case 1:
            return x.sum()
    return x.sum()


def uses_undefined_after_branch(x):
    if x.sum() > 0:
        y = x * 2
    return y.sum()  # REFUSE: maybe undefined
