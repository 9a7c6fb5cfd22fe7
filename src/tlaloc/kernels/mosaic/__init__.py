"""Mosaic (Pallas for TPU) kernels as DXIR ops: ``mosaic_kernel``, its payload cache
(``CACHE``) and the ``tpu_custom_call`` emission."""
from .payload import CACHE, MosaicPayload, payload, cache_key
from .emit import custom_call, module_text
from .primitive import mosaic_kernel, mosaic_kernel_p, lower

__all__ = ["mosaic_kernel", "mosaic_kernel_p", "CACHE", "MosaicPayload", "payload", "cache_key", "custom_call",
           "module_text", "lower"]
