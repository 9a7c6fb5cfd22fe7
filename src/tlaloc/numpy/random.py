"""Placeholder: ``tlaloc.random`` holds the RNG (threefry2x32)."""
