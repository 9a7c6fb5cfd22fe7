"""Find and load the compiled runtime's ``Engine`` for the front doors (server, CLI)."""
from __future__ import annotations


def engine_class():
    """``tlaloc.serving.Engine``, or a RuntimeError that says it is not in this build."""
    import tlaloc.serving as serving
    try:
        return serving.Engine
    except AttributeError:
        raise RuntimeError("tlaloc.serving.Engine is not available in this build (the compiled "
                           "runtime of issue 7); the front doors need it to load an artifact") from None


def load_engine(artifact_dir: str, **options):
    """``tlaloc.serving.Engine(artifact_dir, **options)``."""
    return engine_class()(str(artifact_dir), **options)
