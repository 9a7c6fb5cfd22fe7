"""Suite-wide settings.

Every transformed function called in the tests also runs its DXIR graph in the
reference interpreter and checks that the rendered Python returned the same bits
(TLALOC_CHECK_RENDER=1).
"""
import os

os.environ.setdefault("TLALOC_CHECK_RENDER", "1")
