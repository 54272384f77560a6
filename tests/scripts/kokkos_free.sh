#!/usr/bin/env bash
# The libraries the energy tool loads into other Kokkos programs (and that must not bring a second
# Kokkos) reference no Kokkos symbol: the HDF5 I/O (joule_core_io), the run log (joule_run_log) and
# the energy core (joule_energy_core). nm lists every symbol each object of the archive defines or
# needs; a Kokkos one (demangled "Kokkos::", or Kokkos' C tool interface "kokkosp_" aside, which
# the tool defines itself) fails the check, naming the object.
#   kokkos_free.sh ARCHIVE...
set -euo pipefail
fail=0
for a in "$@"; do
  [ -f "$a" ] || { echo "FAIL: no archive $a"; exit 1; }
  found="$(nm -C "$a" 2>/dev/null | awk '/^[^ ]+:$/ { obj = $1 } /Kokkos::/ && n++ < 5 { print obj " " $0 }')"
  if [ -n "$found" ]; then
    echo "FAIL: $(basename "$a") references Kokkos:"; echo "$found"; fail=1
  else
    echo "$(basename "$a"): $(nm "$a" 2>/dev/null | awk '/ [TUWDBR] / { n++ } END { print n + 0 }') symbols, none of Kokkos"
  fi
done
[ $fail = 0 ] && echo PASS
