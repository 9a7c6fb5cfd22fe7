"""Machine-learning programs written as people write them in plain NumPy (issue 14).

Each reads shapes, lengths and integer arguments, keeps Python lists of
states, or draws noise; ``test_programs.py`` differentiates each with tlaloc
and with autograd (``twin.autograd_twin``) or central differences.
"""
import numpy as np

RS = np.random.RandomState(0)


# -- 1. minibatch MLP ---------------------------------------------------------------------------
def init_mlp(sizes, scale=0.3, seed=1):
    r = np.random.RandomState(seed)
    return [(scale * r.randn(m, n), scale * r.randn(n)) for m, n in zip(sizes[:-1], sizes[1:])]


def mlp_predict(params, inputs):
    for W, b in params[:-1]:
        inputs = np.tanh(np.dot(inputs, W) + b)
    W, b = params[-1]
    logits = np.dot(inputs, W) + b
    return logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))


def minibatch_loss(params, x, y, i):
    batch_size = 4
    idx = slice(i * batch_size, (i + 1) * batch_size)
    return -np.sum(mlp_predict(params, x[idx]) * y[idx]) / batch_size


def flat_minibatch_loss(flat, x, y, i):
    n_in, n_hidden, n_out = x.shape[1], 5, y.shape[1]
    k = n_in * n_hidden
    W1 = flat[:k].reshape(n_in, n_hidden)
    b1 = flat[k:k + n_hidden]
    W2 = flat[k + n_hidden:k + n_hidden + n_hidden * n_out].reshape(n_hidden, n_out)
    b2 = flat[k + n_hidden + n_hidden * n_out:]
    return minibatch_loss([(W1, b1), (W2, b2)], x, y, i)


# -- 2. RNN over a Python list of hidden states -------------------------------------------------
def rnn_loss(W, seq):
    n_hidden = W.shape[1]
    hiddens = [np.zeros(n_hidden)]
    for t in range(len(seq)):
        h = np.tanh(np.dot(np.concatenate([seq[t], hiddens[-1]]), W))
        hiddens.append(h)
    outputs = [np.sum(h ** 2) for h in hiddens[1:]]
    return np.sum(np.array(outputs)) / len(outputs)


# -- 3. LSTM over a Python list -----------------------------------------------------------------
def sigmoid(x):
    return 0.5 * (np.tanh(x / 2.0) + 1.0)


def lstm_loss(W, seq):
    n = W.shape[1] // 4
    h, c = np.zeros(n), np.zeros(n)
    hs = []
    for x_t in seq:
        z = np.dot(np.concatenate([x_t, h]), W)
        i, f, o, g = z[:n], z[n:2 * n], z[2 * n:3 * n], z[3 * n:]
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        hs.append(h)
    return np.sum(np.stack(hs) ** 2)


# -- 4. convnet reshaping to computed sizes -----------------------------------------------------
def conv_net(kernel, images):
    n, rows, cols = images.shape
    k = kernel.shape[0]
    out_r, out_c = rows - k + 1, cols - k + 1
    acc = np.zeros((n, out_r, out_c))
    for a in range(k):
        for b in range(k):
            acc = acc + kernel[a, b] * images[:, a:a + out_r, b:b + out_c]
    pooled = np.maximum(acc, 0.0).reshape(n, out_r // 2, 2, out_c).mean(axis=2)
    features = pooled.reshape(n, (out_r // 2) * out_c)
    return np.sum(features.reshape(n, -1) ** 2) / n


# -- 5. black-box variational inference, fresh noise per call -----------------------------------
def log_density(z):
    return -0.5 * np.sum(z ** 2, axis=1) - 0.1 * np.sum(z ** 4, axis=1)


def bbvi_objective(params, n_samples):
    D = len(params) // 2
    mean, log_std = params[:D], params[D:]
    samples = RS.randn(n_samples, D) * np.exp(log_std) + mean
    entropy = 0.5 * D * (1.0 + np.log(2 * np.pi)) + np.sum(log_std)
    return -(entropy + np.mean(log_density(samples)))


# -- 6. VAE with the reparameterisation trick ---------------------------------------------------
def vae_elbo(enc_W, dec_W, x):
    latent = enc_W.shape[1] // 2
    h = np.dot(x, enc_W)
    mean, log_std = h[:, :latent], h[:, latent:]
    z = mean + np.exp(log_std) * RS.randn(*mean.shape)
    recon = sigmoid(np.dot(z, dec_W))
    log_lik = np.sum(x * np.log(recon) + (1 - x) * np.log(1 - recon))
    kl = 0.5 * np.sum(np.exp(2 * log_std) + mean ** 2 - 1.0 - 2 * log_std)
    return (log_lik - kl) / x.shape[0]


# -- 7. attention with heads reshaped to computed sizes -----------------------------------------
def attention(Wqkv, x):
    n, d = x.shape
    heads = 2
    qkv = np.dot(x, Wqkv)
    q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
    q = q.reshape(n, heads, d // heads).transpose((1, 0, 2))
    k = k.reshape(n, heads, d // heads).transpose((1, 0, 2))
    v = v.reshape(n, heads, d // heads).transpose((1, 0, 2))
    s = np.matmul(q, k.transpose((0, 2, 1))) / np.sqrt(d // heads)
    s = s - np.max(s, axis=-1, keepdims=True)
    p = np.exp(s) / np.sum(np.exp(s), axis=-1, keepdims=True)
    out = np.matmul(p, v).transpose((1, 0, 2)).reshape(n, d)
    return np.sum(out ** 2)


# -- 8. layer norm + residual MLP ---------------------------------------------------------------
def layer_norm(x, eps=1e-5):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def residual_mlp(W, x):
    d = x.shape[-1]
    h = layer_norm(x)
    h = np.maximum(np.dot(h, W[:, :2 * d]), 0.0)
    return np.sum((x + np.dot(h, W.T[:2 * d, :])) ** 2) / x.size


# -- 9. logistic and softmax regression ---------------------------------------------------------
def logistic_nll(w, X, y):
    logits = np.dot(X, w)
    return np.sum(np.log1p(np.exp(-logits * (2 * y - 1))))


def softmax_regression(W, X, labels):
    n_classes = W.shape[1]
    onehot = np.eye(n_classes)[labels]
    logits = np.dot(X, W)
    logits = logits - np.max(logits, axis=1, keepdims=True)
    log_p = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.sum(onehot * log_p) / len(labels)


# -- 10. dict-of-parameters model ---------------------------------------------------------------
def dict_model(params, x):
    h = np.tanh(np.dot(x, params["W1"]) + params["b1"])
    return np.sum((np.dot(h, params["W2"]) - 1.0) ** 2) + 1e-3 * sum(np.sum(p ** 2) for p in params.values())


# -- 11. matrix factorisation with a mask and L2 ------------------------------------------------
def matrix_factorisation(U, V, R, mask):
    rank = U.shape[1]
    err = (R - np.dot(U, V.T)) * mask
    return np.sum(err ** 2) + 0.01 / rank * (np.sum(U ** 2) + np.sum(V ** 2))


# -- 12. polynomial features from a list comprehension -------------------------------------------
def poly_regression(w, x, y):
    degree = len(w)
    features = np.stack([x ** k for k in range(degree)], axis=1)
    return np.mean((np.dot(features, w) - y) ** 2)
