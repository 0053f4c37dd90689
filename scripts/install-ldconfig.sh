#!/bin/sh
# The last step of `meson install` into the live system (meson.build skips
# it under DESTDIR: a package or an image runs ldconfig where it is
# installed): as root, refresh ld.so's cache so that programs linked with
# -lsalusclient alone find the new library at once. A user's own install
# has no cache to refresh; its programs find the library by their run path.
[ "$(id -u)" -eq 0 ] || exit 0
PATH=$PATH:/usr/sbin:/sbin
command -v ldconfig >/dev/null 2>&1 || exit 0
exec ldconfig
