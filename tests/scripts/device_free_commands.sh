#!/usr/bin/env bash
# Commands that need no device never start Kokkos (apps/joule.cpp, kDeviceFreeCommands): on a
# login node with a CUDA build and no GPU, --help, inspect, data info/synth, energy probe and
# info --no-device must run. Observed from outside: the energy tool, loaded as a Kokkos Tools
# library, writes its profile when Kokkos finalises, so a command that started Kokkos leaves a
# file. `joule info` (which computes) is the control that shows the probe sees a start.
# usage: device_free_commands.sh JOULE ENERGY_TOOL_SO   (JOULE_TEST_KOKKOS_TOOLS_VARIABLE: the
# variable this Kokkos reads, KOKKOS_PROFILE_LIBRARY for 3.4)
set -euo pipefail
joule="$(realpath "$1")"
tool="$(realpath "$2")"
tools_variable="${JOULE_TEST_KOKKOS_TOOLS_VARIABLE:-KOKKOS_TOOLS_LIBS}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$work"

# run NAME ARGS...: joule ARGS with the tool loaded; profile NAME.profile.h5 if Kokkos started; exit status in $rc.
run() {
  local name="$1"
  shift
  rc=0
  env "$tools_variable=$tool" JOULE_ENERGY_OUT="$work/$name.profile.h5" "$joule" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
}
started() { [ -e "$work/$1.profile.h5" ] || grep -q "^joule energy tool:" "$work/$1.err"; }

# The control: `joule info` starts Kokkos, and its profile is a run log `joule inspect` reads.
run control info
[ "$rc" = 0 ] || fail "joule info: exit $rc: $(cat control.err)"
started control || fail "the probe saw no Kokkos start for joule info: $(cat control.err)"
log="$work/control.profile.h5"
[ -s "$log" ] || fail "joule info's profile is not a file"
"$joule" data synth --out "$work/data.h5" --count 4 >/dev/null

checked=0
device_free() {  # device_free NAME ARGS...: exit 0, and Kokkos never started
  local name="$1"
  run "$@"
  [ "$rc" = 0 ] || fail "joule ${*:2}: exit $rc: $(cat "$work/$name.err")"
  ! started "$name" || fail "joule ${*:2} started Kokkos (the energy tool wrote its profile)"
  checked=$((checked + 1))
}
device_free help --help
device_free train_help train --help
device_free version --version
device_free info_no_device info --no-device
device_free synth data synth --out "$work/synth.h5" --count 3
device_free data_info data info "$work/data.h5"
device_free probe energy probe
device_free inspect inspect "$log"
device_free inspect_csv inspect --csv "$log"
grep -q "not started: --no-device" info_no_device.out || fail "info --no-device: $(cat info_no_device.out)"
grep -q "^Kokkos [0-9]" info_no_device.out || fail "info --no-device names no Kokkos version: $(cat info_no_device.out)"
# info names the Kokkos this build found (JOULE_TEST_KOKKOS_VERSION, JOULE_TEST_KOKKOS_DEVICES: CMake's
# Kokkos_VERSION and Kokkos_DEVICES), its devices, and the fp32 GEMMs' path (JOULE_TEST_GEMM_PATH:
# kokkos-kernels or blas, CMake's choice), with and without --no-device.
if [ -n "${JOULE_TEST_KOKKOS_VERSION:-}" ]; then
  IFS=. read -r major minor patch <<<"$JOULE_TEST_KOKKOS_VERSION"
  version="$((10#$major)).$((10#$minor)).$((10#$patch))"
  for out in info_no_device.out control.out; do
    grep -q "^  Kokkos: $version (devices: " "$out" || fail "info does not name Kokkos $version and its devices: $(cat "$out")"
    devices="$(sed -n "s/^  Kokkos: $version (devices: \([^);]*\)[);].*/\1/p" "$out")"
    for device in ${JOULE_TEST_KOKKOS_DEVICES//,/ }; do
      grep -qi "\b$device\b" <<<"$devices" || fail "info's devices ($devices) leave out $device"
    done
    case "${JOULE_TEST_GEMM_PATH:-}" in
      kokkos-kernels) grep -q "^GEMMs (train.precision): fp32: Kokkos-Kernels" "$out" || fail "info: $(cat "$out")" ;;
      blas) grep -q "^GEMMs (train.precision): fp32: direct BLAS: " "$out" || fail "info: $(cat "$out")" ;;
      *) fail "JOULE_TEST_GEMM_PATH is '${JOULE_TEST_GEMM_PATH:-}' (kokkos-kernels or blas)" ;;
    esac
  done
fi

# --kokkos-* arguments given to such a command do nothing, and joule says so.
device_free inspect_flag inspect "$log" --kokkos-threads=1
grep -qxF "joule: note: --kokkos-threads=1 not used: \`joule inspect\` does not start Kokkos" inspect_flag.err ||
  fail "inspect --kokkos-threads=1: $(cat inspect_flag.err)"
# ... and to a command that computes, they reach Kokkos wherever they stand.
run threads info --kokkos-threads=1
[ "$rc" = 0 ] && grep -q "(1 threads/concurrency)" threads.out || fail "info --kokkos-threads=1: $(cat threads.out threads.err)"
# A --kokkos-* argument Kokkos does not know is an error naming it (CLI11 used to see it).
run unknown info --kokkos-no-such-option=1
[ "$rc" = 1 ] || fail "info --kokkos-no-such-option=1: exit $rc: $(cat unknown.err)"
grep -q "^joule: error: Kokkos did not take --kokkos-no-such-option=1" unknown.err || fail "unknown: $(cat unknown.err)"
# joule's own errors come before Kokkos starts.
run bad_option info --no-such-option
[ "$rc" != 0 ] && ! started bad_option || fail "info --no-such-option: exit $rc, or Kokkos started"
echo "PASS: $checked commands ran without starting Kokkos; joule info started it (the control)"
