"""Programs for the NumPy-surface table, each written once over a NumPy-like
module: ``make(numpy)`` gives the functions tlaloc transforms from source (they
also run eagerly as plain NumPy), ``make(jax.numpy)`` their JAX twins. Each
takes float64 arrays and returns one float array (integer results are mixed in
as constants so that derivatives pass through them)."""
import jax.numpy as jnp
import numpy as onp

from tlaloc import F64

# Programs that need the rank of x (tlaloc builds derivatives before shapes are
# known) annotate it; the sizes stay symbolic.


def make(np):
    P = {}

    def reg(fn):
        P[fn.__name__] = fn
        return fn

    @reg
    def sort(x):
        return np.sort(x, axis=-1) * np.arange(x.shape[-1])

    @reg
    def sort_axis0(x):
        return np.sort(x, axis=0)

    @reg
    def argsort_gather(x):
        i = np.argsort(x, axis=-1)
        return np.take_along_axis(x * x, i, axis=-1)

    @reg
    def take_along(x):
        i = np.argmax(x, axis=-1)
        return np.take_along_axis(x, np.expand_dims(i, -1), axis=-1) + 0.0 * x

    @reg
    def searchsorted(x):
        edges = np.array([-1.0, 0.0, 0.5, 2.0])
        return x * np.searchsorted(edges, x)

    @reg
    def repeat(x):
        return np.repeat(x, 2, axis=0)

    @reg
    def roll(x):
        return np.roll(x, 2, axis=-1) * np.roll(x, -1, axis=0)

    @reg
    def roll_flat(x):
        return np.roll(x, 3)

    @reg
    def diff(x):
        return np.diff(x, axis=-1) + np.diff(x, n=2, axis=0).sum()

    @reg
    def cumsum_variants(x):
        return np.cumsum(x, axis=0) + np.cumprod(x, axis=-1) + np.nancumsum(x, axis=0)

    @reg
    def inverse_hyperbolic(x):
        return np.arcsinh(x) + np.arctanh(np.tanh(x) * 0.5) + np.arccosh(np.abs(x) + 1.5)

    @reg
    def copysign(x):
        return np.copysign(x, np.flip(x, -1)) + np.signbit(x) * x

    @reg
    def dot_scalar(x):
        return np.dot(x, 1.5) + np.dot(2.0, x)

    @reg
    def linspace(x):
        return np.linspace(np.sum(x) * 0.1, np.max(x) + 3.0, 5)

    @reg
    def flips(x: F64['n', 'm']):
        return np.flipud(x) * np.fliplr(x) + np.rot90(x, 2)

    @reg
    def stacks(x: F64['n', 'm']):
        return np.hstack([x, x * 2.0]).sum() + np.vstack([x, -x]).sum(axis=0).sum() \
            + np.column_stack([x[:, 0], x[:, 1]]).sum()

    @reg
    def tile(x: F64['n', 'm']):
        return np.tile(x, (2, 1)) * 1.5

    @reg
    def atleast(x: F64['n', 'm']):
        return np.atleast_2d(x[0]) + np.atleast_1d(x[0, 0]) + np.atleast_3d(x)[..., 0]

    @reg
    def meshgrid(x: F64['n', 'm']):
        a, b = np.meshgrid(x[0], x[1])
        return a * b

    @reg
    def diag(x: F64['n', 'm']):
        return np.diag(x[0], 1) + np.diag(np.diag(x[:, :2] @ x[:, :2].T)).sum()

    @reg
    def det_inv(x: F64['n', 'm']):
        m = x[:, :3] @ x[:, :3].T + 3.0 * np.eye(3)
        return np.linalg.det(m) * np.linalg.inv(m)

    @reg
    def eigh(x: F64['n', 'm']):
        m = x[:, :3] @ x[:, :3].T + np.diag(np.array([0.0, 1.0, 3.0]))
        w, v = np.linalg.eigh(m)
        return w[:, None] * v * v[0:1, :]            # eigenvectors' sign fixed by v * v[0]

    @reg
    def svd(x: F64['n', 'm']):
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        return (u * vh[:, 0]) @ (s[:, None] * vh * vh[:, 0:1]) + np.linalg.norm(x, 2)

    @reg
    def qr(x: F64['n', 'm']):
        q, r = np.linalg.qr(x.T)
        d = np.sign(np.diagonal(r))
        return (q * d) @ (r * d[:, None]) + q * d + (r * d[:, None]).sum()

    @reg
    def pinv(x: F64['n', 'm']):
        return np.linalg.pinv(x) + np.linalg.lstsq(x.T, x[0], rcond=None)[0].sum()

    @reg
    def norms(x: F64['n', 'm']):
        return (np.linalg.norm(x, 1) + np.linalg.norm(x, np.inf) + np.linalg.norm(x, "nuc")
                + np.linalg.norm(x, 3, axis=1) + np.linalg.norm(x, -np.inf, axis=0).sum())

    # -- order statistics, NaN-reductions, where=, pad modes, interp, kron ----------------------

    @reg
    def median(x):
        return np.median(x, axis=-1) + np.median(x) + np.median(x[:, :3], axis=1)

    @reg
    def median_axis0_keepdims(x):
        return np.median(x, axis=0, keepdims=True) * x

    @reg
    def quantile(x):
        return np.quantile(x, 0.3, axis=0) + np.quantile(x, np.array([0.0, 0.25, 0.9, 1.0]), axis=0).sum(0)

    @reg
    def percentile(x):
        return np.percentile(x, 70.0) + np.percentile(x, np.array([10.0, 50.0]), axis=1).sum(0)

    @reg
    def nan_reductions(x):
        y = np.where(x > 1.0, np.nan, x)                    # NaN where x > 1: their gradient is 0
        return (np.nansum(y, axis=0) + np.nanmean(y, axis=0) + np.nanmax(y, axis=0) + np.nanmin(y, axis=0)
                + np.nanvar(y, axis=0) + np.nanstd(y, axis=0, ddof=1) + np.nanprod(y, axis=0))

    @reg
    def nan_quantiles(x):
        y = np.where(x > 1.0, np.nan, x)
        return np.nanmedian(y, axis=0) + np.nanquantile(y, 0.4, axis=0) + np.nanpercentile(y, 90.0, axis=0)

    @reg
    def where_reductions(x):
        m = x > -0.5
        return (np.sum(x, axis=1, where=m) + np.mean(x, axis=1, where=m) + np.prod(x, axis=1, where=m)
                + np.max(x, axis=1, where=m, initial=-1.0) + np.min(x, axis=1, where=m, initial=1.0)
                + np.max(x, axis=1, initial=0.5) + np.var(x, axis=1, where=m))

    @reg
    def pad_modes(x: F64['n', 'm']):
        return (np.pad(x, ((1, 2), (3, 0)), mode="edge") * np.pad(x, ((1, 2), (3, 0)), mode="reflect")
                + np.pad(x, ((1, 2), (3, 0)), mode="symmetric") + np.pad(x, ((1, 2), (3, 0)), mode="wrap"))

    @reg
    def pad_past_the_length(x: F64['n', 'm']):
        return np.pad(x, ((4, 5), (6, 1)), mode="reflect") + np.pad(x, ((4, 5), (6, 1)), mode="symmetric") \
            + np.pad(x, 7, mode="wrap")[:12, :11]

    @reg
    def interp(x):
        xp = np.cumsum(np.abs(x[0]) + 0.1)                  # increasing knots, differentiable
        return np.interp(x * 2.0, xp, x[1] * x[2]) + np.interp(x, np.array([-0.5, 0.0, 1.0]),
                                                               np.array([1.0, 3.0, 2.0]), left=-1.0)

    @reg
    def kron(x: F64['n', 'm']):
        return np.kron(x[:2, :2], x) + np.kron(x[0], x[1])[None, :16].sum() + np.kron(x[0, :2], x).sum()

    return P


T, J = make(onp), make(jnp)
