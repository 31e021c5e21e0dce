"""The C ABI through cffi: the declarations of rig_capi.h, and librig loaded once.

The library and header are the ones the package was built with (setup.py copies them in),
or those RIG_LIBRARY and RIG_HEADER name, such as a checkout's target/debug/librig.so.
"""

import os
import re
from pathlib import Path

from cffi import FFI

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent.parent


def _header() -> Path:
    named = os.environ.get("RIG_HEADER")
    if named:
        return Path(named)
    for p in (_HERE / "rig_capi.h", _ROOT / "rig-capi" / "include" / "rig_capi.h"):
        if p.exists():
            return p
    raise ImportError("rig_capi.h not found: install the package with pip, or set RIG_HEADER")


def _library() -> str:
    named = os.environ.get("RIG_LIBRARY")
    if named:
        return named
    p = _HERE / "librig.so"
    if p.exists():
        return str(p)
    raise ImportError("librig.so not found: install the package with pip, or set RIG_LIBRARY")


def _declarations(text: str) -> str:
    """The header as cffi's cdef reads it: no preprocessor lines, no extern "C" block."""
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#") or s.startswith('extern "C"') or s.startswith("}  // extern"):
            continue
        lines.append(line)
    return re.sub(r"//[^\n]*", "", "\n".join(lines))


ffi = FFI()
ffi.cdef(_declarations(_header().read_text()))
lib = ffi.dlopen(_library())
