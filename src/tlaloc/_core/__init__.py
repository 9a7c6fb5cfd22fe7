"""DXIR: the SSA graph, its primitives, printer, verifier and interpreter."""
