"""Moved to :mod:`tlaloc.serving.server.limits`; this name stays because the README documents it."""
from .server.limits import ServerLimits

__all__ = ["ServerLimits"]
