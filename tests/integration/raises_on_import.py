"""An engine module whose import fails with something other than ImportError (a CUDA check
at import time, as some engine packages do)."""

raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")
