"""glibc's allocator settings for timing runs, set before the process starts.

With glibc's defaults, every large tensor freed between steps goes back to the system
(``mmap``/``munmap`` for blocks above the dynamic mmap threshold, ``trim`` at the top of the
heap), and the next step pays page faults to get it back: measured on the 2-core machine, the
centralised ceiling of ``simulate.py`` doubled with ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` at 1 GiB. The variables are read when the C library starts, so
:func:`keep_freed_memory` re-executes the script with them set (once; ``--default-allocator``
keeps glibc's defaults), and every figure of the run — engine and ceiling alike — is measured
under the same allocator.
"""

from __future__ import annotations

import os
import sys

SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def keep_freed_memory() -> str:
    """Re-execute this script under :data:`SETTINGS` unless set (or ``--default-allocator`` is
    given); returns a line saying which allocator the figures were measured under."""
    if "--default-allocator" in sys.argv:
        sys.argv.remove("--default-allocator")
        return "allocator: glibc defaults"
    if sys.platform.startswith("linux") and any(
        os.environ.get(key) != value for key, value in SETTINGS.items()
    ):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **SETTINGS})
    settings = ", ".join(f"{key}={value}" for key, value in SETTINGS.items())
    return f"allocator: {settings} (freed memory kept; --default-allocator: glibc defaults)"
