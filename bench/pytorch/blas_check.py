"""Refuses to time PyTorch on the reference BLAS.

Debian's PyTorch 1.13 (python3-torch) is built against the generic libblas.so.3, which the Debian
alternatives system points at whichever BLAS is installed. Without an optimised one that is the
reference (netlib) BLAS, and PyTorch's matrix products run about 30 times slower than they can: a
comparison against it would flatter ddl. require_optimised_blas() prints the BLAS that PyTorch's
process actually loaded and exits with status 3 and the install command when it is the reference one.
"""
import ctypes
import re
import sys

import torch

INSTALL = "sudo apt-get install libopenblas0-openmp"


def loaded_blas():
    """The BLAS shared objects mapped into this process after a product has run."""
    (torch.ones(8, 8) @ torch.ones(8, 8)).sum().item()
    libs = []
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = path.rsplit("/", 1)[-1].lower()
            if ("blas" in name or "mkl" in name) and path not in libs:
                libs.append(path)
    return libs


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def sgemm_provider():
    """The shared object whose sgemm_ this process calls (the first in symbol resolution order)."""
    try:
        process = ctypes.CDLL(None)
        addr = ctypes.cast(process.sgemm_, ctypes.c_void_p)
        info = _DlInfo()
        libdl = ctypes.CDLL("libc.so.6")
        if libdl.dladdr(addr, ctypes.byref(info)) and info.dli_fname:
            return info.dli_fname.decode()
    except (AttributeError, OSError):
        pass
    return ""


def require_optimised_blas(prefix="pytorch"):
    match = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    libs = loaded_blas()
    gemm = sgemm_provider() or (libs[0] if libs else "")
    print(f"# {prefix}: torch {torch.__version__}, BLAS_INFO={match.group(1) if match else 'unknown'}, "
          f"sgemm_ from {gemm or 'unknown'}")
    optimised = any(name in gemm.lower() for name in ("openblas", "mkl", "blis"))
    if not optimised:
        print(f"{prefix}: PyTorch runs on the reference BLAS ({gemm or 'unknown'}), which makes it about "
              f"30x slower than it can be; timing it would flatter ddl. Install an optimised BLAS first:\n"
              f"    {INSTALL}", file=sys.stderr)
        sys.exit(3)
