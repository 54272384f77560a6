#!/usr/bin/env bash
# The device check's bundle path (apps/scripts/device_check.sh --bundle), without a GPU: a stand-in
# bundle of this build's binaries, laid out as apps/scripts/device_bundle.sh lays out the CUDA one,
# goes through unpack, libraries, starts (with the commands that need no device, inspect of a small
# run log among them) and step 1, whose test cases run without ctest and must all pass; a bundle whose test executable is missing fails its start; --deps and a missing
# bundle are refused with the reason.
#   device_check_bundle.sh REPO JOULE ENERGY_TOOL TEST_EXECUTABLE...
set -euo pipefail
repo="$1" joule="$2" tool="$3"; shift 3
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
check="$repo/apps/scripts/device_check.sh"

make_bundle() {  # make_bundle NAME TEST_NAMES...: the archive $work/NAME.tar.gz
  local name="$1" b="$work/$1/joule-device"; shift
  mkdir -p "$b/bin" "$b/lib" "$b/tests" "$b/fixtures"
  cp "$joule" "$b/bin/joule"; cp "$tool" "$b/lib/"
  cp "$work/run-log.h5" "$b/fixtures/"
  local t; for t in "$@"; do [ -f "$t" ] && cp "$t" "$b/tests/"; done
  printf 'joule device bundle (stand-in: %s)\ntests: %s\n' "$name" "$(for t in "$@"; do basename "$t"; done | paste -sd' ')" >"$b/MANIFEST"
  tar -C "$work/$name" -czf "$work/$name.tar.gz" joule-device
}
result() { sed -n "s/^$2 *//p" "$1/summary.txt" | head -1; }

# 1. The bundle path: every host step, then step 1's tests in each executable.
bash "$repo/apps/scripts/small_run_log.sh" "$joule" "$work/run-log.h5" || fail "small_run_log.sh"
make_bundle good "$@"
# Step 1's GPU tests run on this CPU here, which the rest of the suite (or other work) may share:
# 60 s, the GPU's limit, was not always enough beside two busy processes.
rc=0; JOULE_DEVICE_TESTS_LIMIT=240 bash "$check" --bundle "$work/good.tar.gz" --work "$work/w1" --only tests_gpu "$work/o1" >"$work/o1.txt" 2>&1 || rc=$?
cat "$work/o1.txt"
for s in unpack libraries starts tests_gpu; do
  [[ "$(result "$work/o1" $s)" == ok* ]] || fail "$s: $(result "$work/o1" $s)"
done
[ $rc = 0 ] || fail "device_check.sh exited $rc"
tar -xzf "$work/o1/logs.tar.gz" -C "$work/o1"
n="$(grep -c '^== ' "$work/o1/logs/tests_gpu.log")"
[ "$n" -ge 2 ] || fail "step 1 ran tests from $n executables (expected the ordering and offload tests of several)"
grep -q "All tests passed" "$work/o1/logs/tests_gpu.log" || fail "step 1: no 'All tests passed'"
for c in "--help" "info --no-device" "data synth" "data info" "inspect"; do  # commands that start no device
  grep -q "^joule $c.*, GPU hidden: ok" "$work/o1/logs/starts.log" || fail "starts: joule $c with the GPU hidden: $(cat "$work/o1/logs/starts.log")"
done
! grep -qiE "test cases failed|No test cases matched" "$work/o1/logs/tests_gpu.log" || fail "step 1: a test failed or none matched"
# The names with a comma are escaped for Catch2 (e.g. 'reported, an event-ordered one is not').
if grep -q "," <(. "$repo/apps/scripts/device_tests.sh"; catch_test_names "$1" | grep -E 'ordering|offload|bitwise|same bits'); then
  grep -q '\\,' "$work/o1/logs/tests_gpu.log" || fail "a test name with a comma was not escaped"
fi

# 2. A test executable the manifest names but the bundle lacks: its start fails, step 1 does not run.
make_bundle broken "$@" "$work/no-such-test"
rc=0; bash "$check" --bundle "$work/broken.tar.gz" --work "$work/w2" --only tests_gpu "$work/o2" >"$work/o2.txt" 2>&1 || rc=$?
[ $rc != 0 ] || fail "a bundle without its test executable passed"
[[ "$(result "$work/o2" starts)" == FAILED* ]] || fail "starts: $(result "$work/o2" starts)"
[[ "$(result "$work/o2" tests_gpu)" == "not run"* ]] || fail "tests_gpu ran without its executables: $(result "$work/o2" tests_gpu)"

# 3. What is refused, with the reason.
rc=0; bash "$check" --deps x.tar.gz "$work/o3" >"$work/o3.txt" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q -- "--deps is gone" "$work/o3.txt" || fail "--deps: exit $rc, $(cat "$work/o3.txt")"
rc=0; bash "$check" --bundle "$work/none.tar.gz" "$work/o4" >"$work/o4.txt" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "no such file" "$work/o4.txt" || fail "a missing bundle: exit $rc, $(cat "$work/o4.txt")"
echo PASS
