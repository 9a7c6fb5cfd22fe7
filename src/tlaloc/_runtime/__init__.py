"""Runtimes that execute compiled programs (PJRT/XLA here; IREE later)."""
