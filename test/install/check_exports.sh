#!/usr/bin/env bash
# libsalusclient exports exactly the functions <salus/salus.h> declares:
# one missing means a declaration without SALUS_EXPORT (a program linked to
# the library cannot call it), one more means an internal symbol leaks (a
# program could come to depend on it).
#   check_exports.sh LIBSALUSCLIENT.so SALUS_H
set -uo pipefail
lib=${1:?libsalusclient} header=${2:?salus.h}
# each declaration starts a line with SALUS_EXPORT and ends at its ";"; the
# first salus_ name followed by "(" in it is the function's own
declared=$(awk '/^SALUS_EXPORT / {d = ""; on = 1} on {d = d " " $0} on && /;/ {print d; on = 0}' "$header" |
  sed -E 's/^[^(]*[^a-z0-9_](salus_[a-z0-9_]+)[[:space:]]*\(.*/\1/' | sort -u)
# a function declared without the mark is hidden: neither list shows it
unmarked=$(grep -nE '^(const |unsigned |struct )*[a-z_0-9]+[ *]+salus_[a-z0-9_]+\(' "$header")
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort -u)
n_decl=$(grep -c . <<<"$declared")
n_exp=$(grep -c . <<<"$exported")
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
[ -z "$unmarked" ] || echo "FAIL: declared without SALUS_EXPORT: $unmarked"
[ -z "$missing" ] || echo "FAIL: declared in $header but not exported: $missing"
[ -z "$extra" ] || echo "FAIL: exported but not declared SALUS_EXPORT: $(echo $extra | head -c 2000)"
echo "$n_exp symbols exported, $n_decl functions declared SALUS_EXPORT"
[ -z "$unmarked$missing$extra" ] && [ "$n_decl" -gt 0 ]
