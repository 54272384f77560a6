#!/usr/bin/env bash
# plot_run.py under a Python that lacks h5py, matplotlib or numpy (issue 65): a folder on PYTHONPATH
# holds stand-ins whose import fails, as a missing package's does. The script must exit 2 with one
# line (no traceback) naming the missing packages, the Python that runs it (sys.executable) and how
# to install them (apt's python3-* and that Python's pip), and write nothing.
#   plot_run_missing_packages.sh PYTHON SCRIPT
set -euo pipefail
py="${1:?usage: $0 PYTHON SCRIPT}" script="${2:?usage: $0 PYTHON SCRIPT}"
fail() { echo "plot_run_missing_packages: $*" >&2; exit 1; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
echo "not read: the script stops before it opens the log" >"$work/run.h5"
shim() {  # shim NAME...: a folder where importing each NAME raises ModuleNotFoundError
  local dir="$work/shim-$*"; dir="${dir// /-}"; mkdir -p "$dir"
  for name in "$@"; do
    mkdir -p "$dir/$name"
    echo "raise ModuleNotFoundError(\"No module named '$name'\", name='$name')" >"$dir/$name/__init__.py"
  done
  echo "$dir"
}
real="$("$py" -c 'import sys; print(sys.executable)')"
check() {  # check "MISSING..." APT PIP
  local missing="$1" apt="$2" pip="$3" dir rc=0
  # shellcheck disable=SC2086
  dir="$(shim $missing)"
  PYTHONPATH="$dir" "$py" "$script" "$work/run.h5" --out "$work/plots" >"$work/out" 2>"$work/err" || rc=$?
  [ "$rc" -eq 2 ] || { cat "$work/out" "$work/err" >&2; fail "$missing missing: exit $rc, want 2"; }
  [ "$(wc -l <"$work/err")" -eq 1 ] || { cat "$work/err" >&2; fail "$missing missing: not one line"; }
  if grep -q Traceback "$work/err"; then cat "$work/err" >&2; fail "$missing missing: a traceback"; fi
  grep -qF "this Python ($real, " "$work/err" || { cat "$work/err" >&2; fail "$missing missing: the Python is not named"; }
  grep -qF "lacks ${missing// /, } (" "$work/err" || { cat "$work/err" >&2; fail "$missing missing: not named"; }
  grep -qF "sudo apt install $apt;" "$work/err" || { cat "$work/err" >&2; fail "$missing missing: no apt line"; }
  grep -qF "$real -m pip install $pip" "$work/err" || { cat "$work/err" >&2; fail "$missing missing: no pip line"; }
  [ ! -e "$work/plots" ] || fail "$missing missing: $work/plots was made"
  [ ! -s "$work/out" ] || fail "$missing missing: something on standard output"
  echo "$missing missing: $(cat "$work/err")"
}
check "h5py" "python3-h5py" "h5py"
check "matplotlib" "python3-matplotlib" "matplotlib"
check "h5py matplotlib numpy" "python3-h5py python3-matplotlib python3-numpy" "h5py matplotlib numpy"
# A positive control: with nothing shimmed, the same command gets past the imports (and refuses the
# file, which is not HDF5, with exit 2 and no word of packages).
rc=0
"$py" "$script" "$work/run.h5" --out "$work/plots" >"$work/out" 2>"$work/err" || rc=$?
if grep -q "lacks" "$work/err"; then cat "$work/err" >&2; fail "the control says packages are missing"; fi
grep -q "not a joule run log\|cannot\|not an HDF5" "$work/err" || { cat "$work/err" >&2; fail "control: $rc"; }
echo "PASS"
