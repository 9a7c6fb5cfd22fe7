"""Front ends: Python source (AST) → DXIR."""
