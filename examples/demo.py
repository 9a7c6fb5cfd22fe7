"""Placeholder demo; to be rewritten."""
import tlaloc

print("tlaloc", tlaloc.__version__)
