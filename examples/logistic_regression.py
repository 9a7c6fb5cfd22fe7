"""Logistic regression on scikit-learn's breast-cancer data, with tl.grad of plain NumPy.

The objective is scikit-learn's for ``LogisticRegression(C=1)`` (L2 penalty on
the weights, not the intercept) on standardized features:

    J(w, b) = C · Σ_i log(1 + exp(-y_i (x_i·w + b))) + ½ ‖w‖²,   y_i ∈ {-1, +1}

minimized with SciPy's L-BFGS-B using tlaloc's gradient.
"""
import numpy as np


def objective(params, X, y):
    w = params[:-1]
    b = params[-1]
    margins = y * (X @ w + b)
    return np.sum(np.logaddexp(0.0, -margins)) + 0.5 * np.sum(w * w)


def fit(show_source=True):
    import scipy.optimize
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    import tlaloc as tl

    data = load_breast_cancer()
    X = StandardScaler().fit_transform(data.data)            # (n_samples=569, n_features=30)
    y = np.where(data.target == 1, 1.0, -1.0)                # (n_samples,)

    value_and_grad = tl.value_and_grad(objective)            # derivative built here, from the source
    if show_source:
        print(tl.source(value_and_grad))
    res = scipy.optimize.minimize(lambda p: value_and_grad(p, X, y), np.zeros(X.shape[1] + 1),
                                  jac=True, method="L-BFGS-B", options={"gtol": 1e-10, "ftol": 1e-15,
                                                                         "maxiter": 10_000})
    ours = res.x

    ref = LogisticRegression(C=1.0, tol=1e-12, max_iter=100_000).fit(X, data.target)
    theirs = np.concatenate([ref.coef_[0], ref.intercept_])
    return ours, theirs


if __name__ == "__main__":
    ours, theirs = fit()
    print("max |tlaloc - scikit-learn| over 31 coefficients:", np.abs(ours - theirs).max())
