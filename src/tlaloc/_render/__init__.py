"""Back ends that turn DXIR into text: Python source (and StableHLO)."""
