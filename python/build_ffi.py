"""Writes the C source of salus._native, the cffi extension over libsalusclient.

Run at build time by meson (python/salus/meson.build):
`build_ffi.py salus.h OUT.c`. The declarations are the public header's own,
read from it (its body inside `extern "C"`, preprocessor lines dropped, and
a #define that is not an integer literal left for the compiler to
evaluate, the SALUS_EXPORT visibility marks dropped: cffi's parser knows no
attributes), so every function of the C API is reachable from Python and
none is written twice. The extension is compiled in cffi's API mode against
<salus/salus.h>, so the C compiler checks every declaration, struct layout
and enum value once more.
"""
import re
import sys

import cffi


def declarations(header):
    src = open(header, encoding="utf-8").read()
    start, end = src.find('extern "C" {'), src.rfind("#ifdef __cplusplus")
    if start < 0 or end <= start:
        sys.exit(f"build_ffi.py: {header} has no extern \"C\" block")
    out = []
    for line in src[start + len('extern "C" {'):end].splitlines():
        define = re.match(r"\s*#\s*define\s+(\w+)\s+(.*)$", line)
        if define:
            value = define.group(2).split("/*")[0].strip()
            out.append(f"#define {define.group(1)} "
                       + (value if re.fullmatch(r"-?\d+", value) else "..."))
        elif not line.lstrip().startswith("#"):
            out.append(re.sub(r"\bSALUS_EXPORT\s+", "", line))
    return "\n".join(out)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: build_ffi.py salus.h OUT.c")
    ffi = cffi.FFI()
    ffi.cdef(declarations(sys.argv[1]))
    ffi.set_source("salus._native", "#include <salus/salus.h>")
    ffi.emit_c_code(sys.argv[2])


if __name__ == "__main__":
    main()
