"""``while`` programs for the reverse-mode table: value-dependent conditions,
integer counters, nonlinear and array carries, break and return inside, and a
while nested in a for; each next to its JAX twin (the same code over
``jax.numpy``; JAX's eager ``grad`` runs the loop on concrete values).
"""


def f_while_value(x):
    # doubles until the value passes 10: the trip count depends on x
    s = x[0] * x[1]
    n = 0.0
    while s < 10.0:
        s = s * 2.0 + x[1] * s * 0.1
        n = n + 1.0
    return s + n


def j_while_value(x):
    s = x[0] * x[1]
    n = 0.0
    while s < 10.0:
        s = s * 2.0 + x[1] * s * 0.1
        n = n + 1.0
    return s + n


def f_while_counter_index(x):
    # an integer counter indexes the argument inside a value-dependent while
    s = 0.0
    i = 0
    while s < 3.0:
        s = s + x[i % len(x)] ** 2
        i += 1
    return s


def j_while_counter_index(x):
    s = 0.0
    i = 0
    while s < 3.0:
        s = s + x[i % len(x)] ** 2
        i += 1
    return s


def f_while_nonlinear_carry(x):
    # the carry enters its own update nonlinearly
    s = x[0]
    while s < 50.0:
        s = s * s + x[1]
    return s


def j_while_nonlinear_carry(x):
    s = x[0]
    while s < 50.0:
        s = s * s + x[1]
    return s


def f_while_break(x):
    s = x[0]
    k = 0
    while k < 25:
        s = s * 1.5 + x[1]
        if s > 20.0:
            break
        k = k + 1
    return s


def j_while_break(x):
    s = x[0]
    k = 0
    while k < 25:
        s = s * 1.5 + x[1]
        if s > 20.0:
            break
        k = k + 1
    return s


def f_return_in_while(x):
    s = x[0]
    while s < 100.0:
        s = s * 3.0 + x[1]
        if s < 0:
            return s * x[1]
    return s


def j_return_in_while(x):
    s = x[0]
    while s < 100.0:
        s = s * 3.0 + x[1]
        if s < 0:
            return s * x[1]
    return s


def f_while_in_for(x):
    # a value-dependent while nested in a for; the inner trip count differs per i
    t = 0.0
    for i in range(len(x)):
        s = x[i] * x[i] + 0.1
        while s < 5.0:
            s = s * 1.7 + x[i]
        t = t + s
    return t


def j_while_in_for(x):
    t = 0.0
    for i in range(len(x)):
        s = x[i] * x[i] + 0.1
        while s < 5.0:
            s = s * 1.7 + x[i]
        t = t + s
    return t


def f_while_array_carry(x):
    # an array carry, written into by subscript, in a value-dependent while
    a = x * 1.0
    while a.sum() < 10.0:
        a = a * 1.5 + x
        a[0] = a[0] * a[-1] * 0.5
    return (a * a).sum()


def j_while_array_carry(x):
    a = x * 1.0
    while a.sum() < 10.0:
        a = a * 1.5 + x
        a = a.at[0].set(a[0] * a[-1] * 0.5)
    return (a * a).sum()
