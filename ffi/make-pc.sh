#!/bin/sh
# Write shmlimit.pc (from shmlimit.pc.in) to standard output.
#
#   sh ffi/make-pc.sh [PREFIX [LIBDIR [INCLUDEDIR]]] > shmlimit.pc
#
# PREFIX defaults to /usr/local, LIBDIR to PREFIX/lib, INCLUDEDIR to PREFIX/include. To use the
# library straight from a cargo build tree instead of an installed copy:
#   sh ffi/make-pc.sh "$PWD" "$PWD/target/release" "$PWD/ffi/include" > target/shmlimit.pc
#   PKG_CONFIG_PATH=target pkg-config --cflags --libs shmlimit
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:-/usr/local}
libdir=${2:-$prefix/lib}
includedir=${3:-$prefix/include}
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$here/../Cargo.toml" | head -n 1)
[ -n "$version" ] || { echo "make-pc.sh: no version in Cargo.toml" >&2; exit 1; }
# '|' delimits the substitutions: paths hold '/', and may not hold '|' here.
for v in "$prefix" "$libdir" "$includedir"; do
    case $v in *'|'*) echo "make-pc.sh: '|' in a path is not supported: $v" >&2; exit 1 ;; esac
done
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" \
    -e "s|@INCLUDEDIR@|$includedir|g" -e "s|@VERSION@|$version|g" "$here/shmlimit.pc.in"
