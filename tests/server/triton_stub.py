"""A stand-in for Triton's ``triton_python_backend_utils`` and a reader for ``config.pbtxt``.

The stub has the parts of the Python-backend API that ``model.py`` uses (``Tensor``,
``InferenceResponse``, ``TritonError``, ``get_input_tensor_by_name``,
``using_decoupled_model_transaction_policy``, response senders and the final flag),
plus :class:`Request` to build requests in tests. :func:`parse_pbtxt` reads the
protobuf text format subset our configs use into the JSON Triton hands ``initialize``.
"""
import re
import threading
import types

import numpy as np

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


class Tensor:
    """``pb_utils.Tensor``; ``numpy1_stub=True`` mimics a stub built with pybind11 < 2.12 under
    NumPy 2, whose ``as_numpy`` repeats the first element (it reads every item size as 0)."""

    numpy1_stub = False

    def __init__(self, name, array):
        self._name, self._array = name, np.asarray(array)

    @classmethod
    def from_dlpack(cls, name, array):
        return cls(name, np.from_dlpack(array))

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def name(self):
        return self._name

    def as_numpy(self):
        if self.numpy1_stub and self._array.size:
            return np.full_like(self._array, self._array.reshape(-1)[0])
        return self._array


class TritonError:
    def __init__(self, message):
        self._message = message

    def message(self):
        return self._message


class InferenceResponse:
    def __init__(self, output_tensors=(), error=None):
        self._outputs, self._error = list(output_tensors), error

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def output(self, name):
        """What Triton sends for output ``name`` (the tensor's memory, not ``as_numpy``)."""
        return next(t._array for t in self._outputs if t.name() == name)


class Sender:
    """Records what a decoupled model sent; ``done`` is set by the final flag."""

    def __init__(self):
        self.sent, self.done = [], threading.Event()

    def send(self, response=None, flags=0):
        if self.done.is_set():
            raise AssertionError("response sent after the final flag")
        self.sent.append(response)
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.done.set()


class Request:
    def __init__(self, cancelled=False, **inputs):
        self.inputs = {name: Tensor(name, value) for name, value in inputs.items()}
        self.sender, self.cancelled = Sender(), cancelled

    def get_response_sender(self):
        return self.sender

    def is_cancelled(self):
        return self.cancelled


def get_input_tensor_by_name(request, name):
    return request.inputs.get(name)


def using_decoupled_model_transaction_policy(model_config):
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def as_module() -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")
    for name in ("Tensor", "TritonError", "InferenceResponse", "get_input_tensor_by_name",
                 "using_decoupled_model_transaction_policy", "TRITONSERVER_RESPONSE_COMPLETE_FINAL"):
        setattr(module, name, globals()[name])
    return module


_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|("(?:[^"\\]|\\.)*")|([{}\[\]:,])|([^\s{}\[\]:,"]+))')


def parse_pbtxt(text: str) -> dict:
    """The protobuf text format of a Triton model config -> the JSON form Triton passes.

    Repeated fields (``input``, ``output``, ``instance_group``) become lists; ``parameters``
    becomes a map from key to ``{"string_value": ...}``.
    """
    tokens = [next(t for t in m.groups()[1:] if t is not None) for m in _TOKEN.finditer(text)
              if m.group(1) is None and m.group(0).strip()]
    position = 0

    def value():
        nonlocal position
        token = tokens[position]
        position += 1
        if token == "{":
            return message("}")
        if token == "[":
            items = []
            while tokens[position] != "]":
                items.append(value())
                if tokens[position] == ",":
                    position += 1
            position += 1
            return items
        if token.startswith('"'):
            return token[1:-1].encode().decode("unicode_escape")
        if token in ("true", "false"):
            return token == "true"
        return int(token) if re.fullmatch(r"-?\d+", token) else token

    def message(end):
        nonlocal position
        fields: dict = {}
        while position < len(tokens) and tokens[position] != end:
            key = tokens[position]
            position += 1
            if tokens[position] == ":":
                position += 1
            item = value()
            if key in ("input", "output", "instance_group", "parameters"):
                fields.setdefault(key, []).extend(item if isinstance(item, list) else [item])
            else:
                assert key not in fields, f"field {key} given twice"
                fields[key] = item
            if position < len(tokens) and tokens[position] == ",":
                position += 1
        position += 1
        return fields

    config = message(None)
    config["parameters"] = {p["key"]: p["value"] for p in config.get("parameters", [])}
    return config
