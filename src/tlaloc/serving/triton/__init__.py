"""``tlaloc.serving.triton``: serving an artifact from NVIDIA Triton's Python backend.

- :mod:`.repository`: :func:`write_repository` (``tlaloc export-triton``), a model
  repository whose ``config.pbtxt`` declares Triton's usual LLM tensors;
- :mod:`.model`: the ``TritonPythonModel`` copied into it as ``<model>/1/model.py``; it is
  loaded by Triton's stub, never imported by tlaloc (it needs ``triton_python_backend_utils``).
"""
from .repository import config_pbtxt, write_repository

__all__ = ["config_pbtxt", "write_repository"]
