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


def main() -> None:
    folder = os.path.realpath(os.environ["CRASH_DIR"])
    at = int(os.environ["CRASH_AT"])
    seen = 0
    real_replace, real_unlink = os.replace, os.unlink

    def step(path: object) -> None:
        nonlocal seen
        if os.path.realpath(os.fspath(path)).startswith(folder + os.sep):  # type: ignore[arg-type]
            seen += 1
            if seen == at:
                os.kill(os.getpid(), signal.SIGKILL)

    def replace(src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
        step(dst)
        return real_replace(src, dst, *args, **kwargs)

    def unlink(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        step(path)
        return real_unlink(path, *args, **kwargs)

    os.replace, os.unlink = replace, unlink

    from harness.__main__ import main as harness_main

    sys.exit(harness_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
