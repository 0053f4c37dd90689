"""OpenBLAS's kernels for PyTorch peers on the cpu (import this before
torch). Debian's torch does its matmuls in OpenBLAS, which picks kernels
by the processor's model; a VM that hides the model (one reports "Intel(R)
Xeon(R) Processor") gets its oldest, Prescott's SSE3 kernels, which ran a
BERT-sized encoder 2-3x and an MLP's GEMMs 3x slower than the AVX-512
ones. PyTorch's best is what a bench measures, so unless the environment
names a core type, one is chosen from the processor's flags."""
import os


def choose():
    """Sets OPENBLAS_CORETYPE from /proc/cpuinfo's flags unless it is set;
    returns the core type in force ("" for OpenBLAS's own choice)."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return os.environ["OPENBLAS_CORETYPE"]
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line.split(":", 1)[1].split() for line in f
                              if line.startswith("flags")), []))
    except OSError:
        return ""
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    return os.environ.get("OPENBLAS_CORETYPE", "")


CORETYPE = choose()
