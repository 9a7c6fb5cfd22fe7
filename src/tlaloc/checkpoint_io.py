"""Checkpoints: a model and its optimizer state in ONE safetensors file.

    tl.save_checkpoint("run/ckpt.safetensors", model, opt_state, step=1200)
    model, opt_state, step = tl.load_checkpoint("run/ckpt.safetensors", like=(model, opt_state))

Keys are the flattened pytree paths, ``model.blocks.0.attn.q_proj.weight`` and
``opt_state.mu.blocks.0.attn.q_proj.weight``; the metadata holds the step and a
description of both structures (classes and static fields), checked on load
against ``like`` before any array is used. Arrays are stored bit for bit, so a
round trip is exact and a resumed run continues identically.

The write is atomic: the bytes go to a temporary file in the same directory,
are fsync'ed, and ``os.replace`` moves it over the old file (then the
directory is fsync'ed), so a crash leaves either the old or the new file,
never a torn one. ``safetensors.deserialize`` reads the file (BF16 as ``ml_dtypes.bfloat16``); nothing is
pickled.
"""
from __future__ import annotations

import json
import os
import re
import secrets

import ml_dtypes
import numpy as np
from safetensors import deserialize as _st_deserialize
from safetensors.numpy import save as _st_save

from . import _pytree
from .errors import ArgumentError

FORMAT = "tlaloc.checkpoint/1"
_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
           "I64": np.int64, "U64": np.uint64, "I32": np.int32, "U32": np.uint32, "I16": np.int16,
           "U16": np.uint16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_ROOTS = ("model", "opt_state")
_SAVABLE = {np.dtype(d) for d in _DTYPES.values()}


def _describe(value) -> str:
    """A stable text for a static field value (no memory addresses)."""
    if callable(value) and hasattr(value, "__qualname__"):
        return value.__qualname__
    if isinstance(value, np.dtype) or isinstance(value, type):
        return str(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return repr(value)


def _walk(td, prefix, paths):
    """Paths of the leaves of TreeDef ``td`` (in flatten order) and a structure text."""
    k = td.kind
    if k == "leaf":
        paths.append(prefix)
        return "*"
    if k == "none":
        return "None"
    if k == "dataclass":
        cls, names, static = td.aux
        labels = list(names)
        head = cls.__qualname__            # not the module: a script's __main__.Model is the same model
        extra = "".join(f", {n}={_describe(v)}" for n, v in static)
    elif k == "dict":
        labels = [str(key) for key in td.aux[1]]
        head, extra = "dict", ""
    elif k == "namedtuple":
        labels = list(td.aux._fields)
        head, extra = td.aux.__qualname__, ""
    elif k == "custom":
        labels = [str(i) for i in range(len(td.children))]
        head, extra = f"custom:{td.aux[0].__qualname__}", ""
    else:
        labels = [str(i) for i in range(len(td.children))]
        head, extra = k, ""
    inner = [f"{lab}: {_walk(c, f'{prefix}.{lab}', paths)}" for lab, c in zip(labels, td.children)]
    return f"{head}({', '.join(inner)}{extra})"


def _flatten(name, tree):
    leaves, td = _pytree.flatten(tree)
    paths: list = []
    structure = _walk(td, name, paths)
    return leaves, td, paths, structure


def save_checkpoint(path, model, opt_state=None, *, step: int = 0, metadata: dict | None = None) -> None:
    """Write ``model`` and ``opt_state`` (pytrees of arrays) to ``path`` atomically.

    Args:
      path: the file to (re)write; its directory must exist.
      model, opt_state: pytrees; ``opt_state`` may be None.
      step: the training step, stored in the metadata.
      metadata: extra ``str -> str`` entries to store (keys must not start with ``tlaloc.``).
    """
    tensors, structures = {}, {}
    for name, tree in zip(_ROOTS, (model, opt_state)):
        leaves, _, paths, structure = _flatten(name, tree)
        structures[name] = structure
        for p, leaf in zip(paths, leaves):
            if p in tensors:
                raise ArgumentError(f"save_checkpoint: two leaves have the path `{p}` (e.g. a dict key "
                                    f"containing '.' next to a nested dict, or keys 1 and '1'); rename one")
            a = np.asarray(leaf)
            dt = a.dtype if a.dtype.byteorder in "=|" else a.dtype.newbyteorder("=")
            if dt not in _SAVABLE:
                # refused before anything is written: load_checkpoint could not read it back
                raise ArgumentError(f"save_checkpoint: leaf `{p}` ({type(leaf).__name__}) has dtype {a.dtype}, which "
                                    f"tlaloc checkpoints do not store; supported: "
                                    f"{', '.join(sorted(str(np.dtype(d)) for d in _DTYPES.values()))}. Convert "
                                    f"it (e.g. .astype(np.float32)) or keep it out of the saved pytree")
            tensors[p] = a if a.flags.c_contiguous else np.array(a, order="C")   # (keeps 0-d arrays 0-d)
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise ArgumentError(f"save_checkpoint: step must be an int, got {step!r}")
    meta = {"tlaloc.format": FORMAT, "tlaloc.step": str(int(step)),
            "tlaloc.structure": json.dumps(structures, sort_keys=True)}
    if metadata is not None and not isinstance(metadata, dict):
        raise ArgumentError(f"save_checkpoint: metadata must be a dict of str keys to str values, got "
                            f"{type(metadata).__name__}")
    for k, v in (metadata or {}).items():
        if not isinstance(k, str):
            raise ArgumentError(f"save_checkpoint: metadata keys must be str (safetensors stores str -> str), got "
                                f"{k!r}; e.g. metadata={{{str(k)!r}: ...}}")
        if k.startswith("tlaloc."):
            raise ArgumentError(f"save_checkpoint: metadata key {k!r} is reserved")
        meta[str(k)] = str(v)
    data = _st_save(tensors, metadata=meta)
    _atomic_write(os.fspath(path), data)


def _atomic_write(path: str, data: bytes) -> None:
    given = path
    path = os.path.realpath(path)            # through a symlink: rewrite its target, keep the link
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise ArgumentError(f"save_checkpoint: the directory of {given!r} does not exist ({directory!r}); "
                            f"create it first, e.g. os.makedirs({directory!r}, exist_ok=True)")
    if os.path.isdir(path):
        raise ArgumentError(f"save_checkpoint: {given!r} is a directory; pass a file path inside it, e.g. "
                            f"{os.path.join(given, 'ckpt.safetensors')!r}")
    try:
        mode = os.stat(path).st_mode & 0o7777         # an overwrite keeps the old file's permissions
    except FileNotFoundError:
        mode = None
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)   # the umask applies, as for open()
    except OSError as e:
        # regression: the error named the hidden temporary file, not the path the caller gave
        raise type(e)(e.errno, f"save_checkpoint: cannot write {given!r} (a temporary file in {directory!r} "
                               f"could not be created: {e.strerror})", given) from None
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def load_checkpoint(path, like):
    """Read a checkpoint written by ``save_checkpoint``.

    Args:
      path: the file.
      like: ``(model, opt_state)`` (or just ``model``, or ``(model, None)``) with the structure
        to fill: same classes, static fields, keys, shapes and dtypes. A model that is itself a
        2-tuple is read as the model where the file holds no optimizer state and its model
        has the tuple's structure (``(model, None)`` always says so).

    Returns:
      ``(model, opt_state, step)`` (``opt_state`` None when ``like`` is only a model).

    Raises:
      ArgumentError: the file is not a tlaloc checkpoint, or its structure,
        keys, shapes or dtypes differ from ``like`` (every difference is listed by path:
        ``model.layers.1: file has out_features=10, like has out_features=12``).
    """
    with open(os.fspath(path), "rb") as fh:
        raw = fh.read()
    meta = _metadata(raw, path)
    tensors = _load_tensors(raw, path)
    try:
        stored = json.loads(meta["tlaloc.structure"])
        step = int(meta["tlaloc.step"])
        if not isinstance(stored, dict):
            raise ValueError
    except (KeyError, ValueError, TypeError):
        raise ArgumentError(f"load_checkpoint: {os.fspath(path)!r} is damaged: its metadata lacks a valid "
                            f"tlaloc.structure or tlaloc.step") from None
    roots, note = _read_like(like, stored)
    out, problems = [], []
    for name, tree in zip(_ROOTS, roots):
        if name == "opt_state" and tree is None:
            out.append(None)                   # the model alone (the file may hold an optimizer state)
            continue
        leaves, td, paths, structure = _flatten(name, tree)
        if stored.get(name) != structure:
            problems.extend(_structure_differences(name, stored.get(name), structure))
            continue
        new = []
        for p, leaf in zip(paths, leaves):
            ref = np.asarray(leaf)
            if p not in tensors:
                problems.append(f"{p}: missing from the file")
                continue
            got = tensors[p]
            if got.shape != ref.shape or got.dtype != ref.dtype:
                problems.append(f"{p}: file has {got.dtype}{list(got.shape)}, like has {ref.dtype}{list(ref.shape)}")
            new.append(got)
        if not problems:
            out.append(_pytree.unflatten(td, new))
    if problems:
        if not any(p.startswith(("model:", "opt_state:")) for p in problems):
            note = ""                          # how `like` was read is beside the point
        raise ArgumentError(f"load_checkpoint({os.fspath(path)!r}): does not match `like`{note}:\n  "
                            + "\n  ".join(problems))
    return out[0], out[1], step


def _read_like(like, stored: dict):
    """``(model, opt_state or None)`` from ``like``, and a note on how it was read (for errors).

    A 2-tuple is ``(model, opt_state)``; anything else is the model. Where that reading does not
    fit the file but the other one does (a model that is itself a 2-tuple or a list, saved without
    an optimizer state; ``[model, opt_state]`` as a list), the other is taken: only one fits."""
    pair = isinstance(like, (tuple, list)) and not _is_namedtuple(like) and len(like) == 2

    def fits(roots):
        return all(tree is None and name == "opt_state"
                   or stored.get(name) == _flatten(name, tree)[3] for name, tree in zip(_ROOTS, roots))
    as_pair, as_model = (tuple(like) if pair else None), (like, None)
    first, second = (as_pair, as_model) if isinstance(like, tuple) and pair else (as_model, as_pair)
    if second is not None and not fits(first) and fits(second):
        return second, ""
    if first is as_pair:
        note = (" (`like` is a 2-tuple, read as (model, opt_state); if your model itself is a 2-tuple, pass "
                "like=(model, opt_state), or like=(model, None) for the model alone)")
    elif pair:
        note = (f" (`like` is a {type(like).__name__}, read as the model; pass a tuple (model, opt_state) to read "
                f"the optimizer state too)")
    else:
        note = ""
    if first is as_pair and stored.get("model") is not None and like[1] is not None and \
            stored.get("model") == _flatten("model", like[1])[3]:
        note = " (it looks swapped: pass like=(model, opt_state), the model first)"
    return first, note


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _load_tensors(raw: bytes, path) -> dict:
    """The file's arrays by name. ``safetensors.numpy.load`` has no BF16 (NumPy lacks it): the
    dtype names are mapped here, BF16 through ``ml_dtypes``."""
    out = {}
    try:
        views = _st_deserialize(raw)
    except Exception as e:                  # safetensors' SafetensorError: truncated or inconsistent file
        raise ArgumentError(f"load_checkpoint: {os.fspath(path)!r} is truncated or damaged ({e}); it cannot be "
                            f"read: restore it from another copy") from None
    for name, view in views:
        dt = _DTYPES.get(view["dtype"])
        if dt is None:
            raise ArgumentError(f"load_checkpoint: {os.fspath(path)!r} holds `{name}` as {view['dtype']}, which "
                                f"tlaloc checkpoints do not use; supported: {', '.join(sorted(_DTYPES))}")
        out[name] = np.frombuffer(view["data"], dtype=dt).reshape(view["shape"])
    return out


def _structure_differences(name: str, stored, like) -> list:
    """One line per difference between the structure text stored in the file and ``like``'s,
    each naming its path (``model.layers.1: file has out_features=10, like has out_features=12``)."""
    try:
        a, b = _parse_structure(stored or "None"), _parse_structure(like)
    except (ValueError, IndexError):          # a static field whose text the parser cannot split
        return [f"{name}: the structure differs from `like`:\n{_first_difference(stored, like)}"]
    what = {"model": "model", "opt_state": "optimizer state"}[name]
    if a is None:
        return [f"{name}: the file holds no {what}, like has {_summary(b)}"
                + ("; pass like=model (or like=(model, None)) to read the model alone" if name == "opt_state" else "")]
    if b is None:
        return [f"{name}: the file holds {_summary(a)}, like has None"]
    out: list = []
    _diff(name, a, b, out)
    return out or [f"{name}: the structure differs from `like`:\n{_first_difference(stored, like)}"]


def _diff(path: str, a, b, out: list) -> None:
    if a == b:
        return
    if not (isinstance(a, tuple) and isinstance(b, tuple)) or a[0] != b[0]:
        out.append(f"{path}: file has {_summary(a)}, like has {_summary(b)}")
        return
    (_, ca, sa), (_, cb, sb) = a, b
    la, lb = [k for k, _ in ca], [k for k, _ in cb]
    if la != lb:
        noun = "items" if a[0] in ("tuple", "list") else "keys" if a[0] == "dict" else "fields"
        if noun == "items":
            out.append(f"{path}: file has {len(la)} items, like has {len(lb)}")
        else:
            out.append(f"{path}: file has {noun} {la}, like has {lb}")
        return
    for (k, x), (_, y) in zip(ca, cb):
        _diff(f"{path}.{k}", x, y, out)
    if sa != sb:
        da, db = dict(sa), dict(sb)
        for k in sorted(set(da) | set(db), key=lambda k: [n for n, _ in sa + sb].index(k)):
            if da.get(k) != db.get(k):
                out.append(f"{path}: file has {k}={da.get(k, '(none)')}, like has {k}={db.get(k, '(none)')}")


def _summary(node) -> str:
    """``Linear(weight, bias, in_features=3, out_features=2)``, ``an array`` or ``None``."""
    if node == "*":
        return "an array"
    if node is None:
        return "None"
    head, children, statics = node
    parts = [k for k, _ in children][:8] + (["..."] if len(children) > 8 else [])
    parts += [f"{k}={v}" for k, v in statics]
    return f"{head}({', '.join(parts)})"


_STATIC = re.compile(r"[A-Za-z_]\w*=")
_OPEN, _CLOSE = "([{", ")]}"


def _parse_structure(text: str):
    """The structure text of ``_walk`` as a tree: ``"*"`` (an array), ``None``, or
    ``(head, [(label, child)], [(static name, value text)])``. Raises ValueError if it does not parse."""
    pos = 0

    def value() -> str:
        nonlocal pos
        start, depth, quote = pos, 0, None
        while pos < len(text):
            c = text[pos]
            if quote:
                if c == "\\":
                    pos += 1
                elif c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and text.startswith(", ", pos):
                break
            pos += 1
        return text[start:pos]

    def node():
        nonlocal pos
        if text.startswith("*", pos):
            pos += 1
            return "*"
        if text.startswith("None", pos) and (pos + 4 == len(text) or text[pos + 4] in ",)"):
            pos += 4
            return None
        j = text.index("(", pos)
        head, pos = text[pos:j], j + 1
        children, statics = [], []
        if text.startswith(", ", pos):        # a dataclass with static fields only: `Lambda(, fn=relu)`
            pos += 2
        while text[pos] != ")":
            m = _STATIC.match(text, pos)
            if m:
                pos = m.end()
                statics.append((m.group()[:-1], value()))
            else:
                k = text.index(": ", pos)
                label, pos = text[pos:k], k + 2
                children.append((label, node()))
            if text.startswith(", ", pos):
                pos += 2
            elif text[pos] != ")":
                raise ValueError(f"unexpected {text[pos]!r} at {pos}")
        pos += 1
        return head, children, statics

    tree = node()
    if pos != len(text):
        raise ValueError(f"trailing text at {pos}")
    return tree


def _first_difference(a, b, context: int = 70) -> str:
    a = str(a)
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    lo = max(0, k - context)
    return (f"    file: {'...' if lo else ''}{a[lo:k + context]}\n"
            f"    like: {'...' if lo else ''}{b[lo:k + context]}")


def _metadata(raw: bytes, path) -> dict:
    n = int.from_bytes(raw[:8], "little") if len(raw) >= 8 else 0
    try:
        header = json.loads(raw[8:8 + n])
    except (ValueError, UnicodeDecodeError):
        raise ArgumentError(f"load_checkpoint: {os.fspath(path)!r} is not a safetensors file") from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict):
        meta = {}
    if meta.get("tlaloc.format") != FORMAT:
        raise ArgumentError(f"load_checkpoint: {os.fspath(path)!r} is not a tlaloc checkpoint "
                            f"(format {meta.get('tlaloc.format')!r}, expected {FORMAT!r})")
    return meta


def checkpoint_metadata(path) -> dict:
    """The ``str -> str`` metadata of a checkpoint (step, structure, your own entries)."""
    with open(os.fspath(path), "rb") as fh:
        head = fh.read(8)
        n = int.from_bytes(head, "little")
        return _metadata(head + fh.read(n), path)
