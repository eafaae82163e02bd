"""Test helper: ``python crash_at.py ARGS`` runs ``python -m harness ARGS`` and SIGKILLs itself
at an exact moment, to test what a crash leaves behind.

``CRASH_DIR`` names a folder and ``CRASH_AT`` a number N: the process kills itself with
SIGKILL just before the Nth rename (``os.replace``) or removal (``os.unlink``) of a file
inside that folder, i.e. at step N of a goldens update (write the journal, rename each
file, remove the journal). The kernel gives no chance to clean up, as with ``kill -9`` or
the out-of-memory killer.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import StrOrBytesPath


def main() -> None:
    folder = os.path.realpath(os.environ["CRASH_DIR"])
    at = int(os.environ["CRASH_AT"])
    seen = 0
    real_replace, real_unlink = os.replace, os.unlink

    def step(path: StrOrBytesPath) -> None:
        nonlocal seen
        if os.path.realpath(os.fsdecode(path)).startswith(folder + os.sep):
            seen += 1
            if seen == at:
                os.kill(os.getpid(), signal.SIGKILL)

    def replace(src: StrOrBytesPath, dst: StrOrBytesPath, **kwargs: int | None) -> None:
        step(dst)
        return real_replace(src, dst, **kwargs)

    def unlink(path: StrOrBytesPath, **kwargs: int | None) -> None:
        step(path)
        return real_unlink(path, **kwargs)

    os.replace, os.unlink = replace, unlink

    from harness.__main__ import main as harness_main

    sys.exit(harness_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
