"""Scientific programs written as people write them in plain NumPy (issue 14).

Gaussian processes, Bayesian optimisation, HMMs, filters, integrators and
simulations; ``test_programs.py`` differentiates each with tlaloc and checks it
against autograd (``twin.autograd_twin``) or central differences.
"""
import numpy as np


# -- 1. GP marginal likelihood ------------------------------------------------------------------
def rbf(x1, x2, log_ls, log_amp):
    d = (x1[:, None] - x2[None, :]) / np.exp(log_ls)
    return np.exp(log_amp) * np.exp(-0.5 * d ** 2)


def gp_nll(params, x, y):
    log_ls, log_amp, log_noise = params[0], params[1], params[2]
    K = rbf(x, x, log_ls, log_amp) + (np.exp(log_noise) + 1e-6) * np.eye(len(y))
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(K, y)
    return 0.5 * np.dot(y, alpha) + np.sum(np.log(np.sum(L * np.eye(len(y)), axis=1))) + 0.5 * len(y) * np.log(2 * np.pi)


# -- 2. Bayesian optimisation: expected-improvement-like acquisition ---------------------------
def gp_posterior(x_star, x, y, log_ls):
    K = rbf(x, x, log_ls, 0.0) + 1e-4 * np.eye(len(x))
    k_star = rbf(x_star, x, log_ls, 0.0)
    mean = np.dot(k_star, np.linalg.solve(K, y))
    var = 1.0 - np.sum(k_star * np.linalg.solve(K, k_star.T).T, axis=1)
    return mean, var


def acquisition(x_star, x, y):
    mean, var = gp_posterior(x_star, x, y, np.log(0.7))
    std = np.sqrt(np.maximum(var, 1e-9))
    best = np.min(y)
    return np.sum(mean - 2.0 * std) + 0.1 * np.sum((best - mean) ** 2)


# -- 3. HMM forward algorithm with logsumexp ----------------------------------------------------
def logsumexp(a, axis=None):
    m = np.max(a, axis=axis, keepdims=True)
    return np.squeeze(m, axis=axis) + np.log(np.sum(np.exp(a - m), axis=axis))


def hmm_log_likelihood(log_trans, log_emit, observations):
    n_states = log_trans.shape[0]
    log_alpha = -np.log(n_states) + log_emit[:, observations[0]]
    for t in range(1, len(observations)):
        log_alpha = logsumexp(log_alpha[:, None] + log_trans, axis=0) + log_emit[:, observations[t]]
    return logsumexp(log_alpha)


# -- 4. Gaussian mixture log-likelihood (own log-pdf) ------------------------------------------
def gmm_log_likelihood(params, data):
    k = len(params) // 3
    logits, means, log_stds = params[:k], params[k:2 * k], params[2 * k:]
    log_weights = logits - logsumexp(logits)
    z = (data[:, None] - means[None, :]) / np.exp(log_stds)
    log_pdf = -0.5 * z ** 2 - log_stds - 0.5 * np.log(2 * np.pi)
    return np.sum(logsumexp(log_weights + log_pdf, axis=1))


# -- 5. Kalman filter over a Python list of observations ----------------------------------------
def kalman_nll(log_q, observations):
    q, r = np.exp(log_q), 0.5
    mean, var = 0.0, 1.0
    total = 0.0
    for obs in observations:
        var = var + q
        s = var + r
        total = total + 0.5 * (np.log(2 * np.pi * s) + (obs - mean) ** 2 / s)
        gain = var / s
        mean = mean + gain * (obs - mean)
        var = (1 - gain) * var
    return total


# -- 6. pendulum with RK4 over an integer number of steps ---------------------------------------
def pendulum_rhs(state, length):
    theta, omega = state[0], state[1]
    return np.array([omega, -9.81 / length * np.sin(theta)])


def pendulum_final_angle(length, state0, n_steps):
    dt = 1.0 / n_steps
    state = state0
    for _ in range(n_steps):
        k1 = pendulum_rhs(state, length)
        k2 = pendulum_rhs(state + 0.5 * dt * k1, length)
        k3 = pendulum_rhs(state + 0.5 * dt * k2, length)
        k4 = pendulum_rhs(state + dt * k3, length)
        state = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return state[0]


# -- 7. spring network energy with pairwise distances -------------------------------------------
def spring_energy(positions, rest):
    n = positions.shape[0]
    energy = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            d = np.sqrt(np.sum((positions[i] - positions[j]) ** 2))
            energy = energy + (d - rest) ** 2
    return energy


# -- 8. Gaussian log-likelihood with a Cholesky factor ------------------------------------------
def mvn_log_likelihood(L_flat, X):
    n, d = X.shape
    L = np.tril(L_flat.reshape(d, d)) + d * np.eye(d)
    cov = np.dot(L, L.T)
    sol = np.linalg.solve(cov, X.T)
    return -0.5 * np.sum(X.T * sol) - 0.5 * n * np.linalg.slogdet(cov)[1] - 0.5 * n * d * np.log(2 * np.pi)


# -- 9. ridge regression in closed form ---------------------------------------------------------
def ridge_validation_loss(log_lam, X, y, X_val, y_val):
    d = X.shape[1]
    w = np.linalg.solve(np.dot(X.T, X) + np.exp(log_lam) * np.eye(d), np.dot(X.T, y))
    return np.mean((np.dot(X_val, w) - y_val) ** 2)


# -- 10. mean-field Ising fixed-point iterations ------------------------------------------------
def mean_field_free_energy(J, h):
    m = np.zeros(len(h))
    for _ in range(20):
        m = np.tanh(np.dot(J, m) + h)
    return -0.5 * np.dot(m, np.dot(J, m)) - np.dot(h, m)


# -- 11. Sinkhorn iterations in log space -------------------------------------------------------
def sinkhorn_cost(C, n_iters):
    n, m = C.shape
    log_a, log_b = -np.log(n) * np.ones(n), -np.log(m) * np.ones(m)
    f, g = np.zeros(n), np.zeros(m)
    for _ in range(n_iters):
        f = -logsumexp(g[None, :] - C, axis=1) + log_a
        g = -logsumexp(f[:, None] - C, axis=0) + log_b
    P = np.exp(f[:, None] + g[None, :] - C)
    return np.sum(P * C)


# -- 12. neural ODE with an Euler integrator and a validated step count -------------------------
def neural_ode(W, x0, n_steps):
    if n_steps <= 0:
        raise ValueError("n_steps must be positive")
    h = 1.0 / n_steps
    x = x0
    trajectory = [x]
    for _ in range(n_steps):
        x = x + h * np.tanh(np.dot(W, x))
        trajectory.append(x)
    return np.sum(trajectory[-1] ** 2) + 0.1 * sum(np.sum(t) for t in trajectory)


# -- 13. Student-t robust regression ------------------------------------------------------------
def student_t_loss(w, X, y):
    nu = 4.0
    resid = y - np.dot(X, w)
    return np.sum(0.5 * (nu + 1) * np.log1p(resid ** 2 / nu))


# -- 14. Poisson GLM ----------------------------------------------------------------------------
def poisson_nll(w, X, counts):
    eta = np.dot(X, w)
    return np.sum(np.exp(eta) - counts * eta)


# -- 15. heat equation, explicit steps with boundary handling by slicing ------------------------
def heat_final(u0, n_steps):
    u = u0
    for _ in range(n_steps):
        lap = np.zeros(u.shape)
        lap[1:-1] = u[2:] - 2 * u[1:-1] + u[:-2]
        u = u + 0.2 * lap
    return np.sum(u ** 2 * np.arange(len(u)))
