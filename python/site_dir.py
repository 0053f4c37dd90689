"""Prints where, under an install prefix, the salus package goes so that
the python3 running this (Debian's /usr/bin/python3) imports it.

`site_dir.py PREFIX` prints two lines: the folder relative to PREFIX, and
"searched" or "not searched" (whether this python3 looks there by itself).
Debian's python3 searches /usr/lib/python3/dist-packages (Debian's packages)
and /usr/local/lib/python3.X/dist-packages (the administrator's), not the
lib/python3/dist-packages under /usr/local that meson would pick. For a
prefix it does not search, the folder is the one /usr/local would get, so
PYTHONPATH=PREFIX/<that folder> makes the package importable.
"""
import os
import site
import sys
import sysconfig


def searched_under(prefix):
    """This interpreter's site folders under prefix, relative to it, in the
    interpreter's order; folders of a nested prefix (/usr/local inside /usr)
    are not the prefix's own."""
    out = []
    for d in site.getsitepackages():
        rel = os.path.relpath(os.path.normpath(d), prefix)
        if not rel.startswith(".."):
            out.append(rel)
    return [r for r in out if r.startswith("lib")]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: site_dir.py PREFIX")
    prefix = os.path.normpath(sys.argv[1])
    own = searched_under(prefix)
    if own:
        print(own[0])
        print("searched")
        return
    local = searched_under("/usr/local")
    if local:
        print(local[0])
    else:  # not a Debian python3: its own layout for any prefix
        print(os.path.relpath(sysconfig.get_path("purelib", "posix_prefix",
                                                 vars={"base": prefix, "platbase": prefix}),
                              prefix))
    print("not searched")


if __name__ == "__main__":
    main()
