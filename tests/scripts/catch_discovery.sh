#!/usr/bin/env bash
# The test-time listing of Catch2 test cases (cmake/detail/catch_list_tests.cmake), checked with
# stand-in executables inside a throw-away ctest directory:
#   - names with the characters Catch2's test specs treat specially (, [ ] \) and CMake's list
#     separator (;) become one ctest test each, and the spec passed on has them escaped;
#   - an executable that cannot start (libcuda.so.1 missing, as on a GPU-less login node) or
#     lists no tests becomes one failing test that says why;
#   - test cases the executable lists for the spec [long] get the ctest label `long`, no others;
#   - the list is cached until the executable changes;
#   - a cross-compiled executable is listed and run through its emulator (JOULE_TEST_EMULATOR).
# Usage: catch_discovery.sh CMAKE_SOURCE_DIR WORK_DIR [CMAKE CTEST]
set -euo pipefail
src="$1"; work="$2"; cmake="${3:-cmake}"; ctest="${4:-ctest}"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

# A stand-in that lists four names (one of them for the spec [long], exiting non-zero as Catch2 v3
# does when a spec matches few), and records each time it is asked.
cat > lists <<'SH'
#!/bin/sh
echo "listed $1" >> "$(dirname "$0")/calls"
if [ "$1" = "[long]" ]; then printf '%s\n' 'ops: gemm - Kokkos::OpenMP'; exit 2; fi
printf '%s\n' 'plain name' 'a, b [tag] c\d' 'x; y' 'ops: gemm - Kokkos::OpenMP'
exit 4
SH
printf '#!/bin/sh\necho "./broken: error while loading shared libraries: libcuda.so.1: cannot open shared object file" >&2\nexit 127\n' > broken
printf '#!/bin/sh\nexit 0\n' > empty
chmod +x lists broken empty
# A cross-compiled executable (cmake/toolchains/aarch64-linux-gnu.cmake): one only its emulator can
# run (a script without the execute bit, run by `emulate`, which takes an option of its own, as
# qemu does) is listed and run through JOULE_TEST_EMULATOR.
printf '#!/bin/sh\n[ "$1" = --cpu=x ] || exit 9\nshift\necho "emulated $*" >> "%s/calls"\nexec sh "$@"\n' "$work" > emulate
printf 'if [ "$1" = --list-test-names-only ]; then echo "emulated case"; exit 1; fi\n[ "$1" = "emulated case" ]\n' > cross
chmod +x emulate
for exe in lists broken empty cross; do
  cat > "$exe.cmake" <<CM
set(JOULE_TEST_TARGET [==[$exe]==])
set(JOULE_TEST_EXECUTABLE [==[$work/$exe]==])
$([ "$exe" = cross ] && echo "set(JOULE_TEST_EMULATOR [==[$work/emulate]==] --cpu=x)")
set(JOULE_TEST_WORKING_DIR [==[$work]==])
set(JOULE_TEST_LIST_ARGS --list-test-names-only)
set(JOULE_TEST_RUN_ARGS --warn NoTests)
set(JOULE_TEST_PROPERTIES TIMEOUT 77)
set(JOULE_CMAKE_COMMAND [==[$(command -v "$cmake")]==])
include([==[$src/cmake/detail/catch_list_tests.cmake]==])
CM
  echo "include([==[$work/$exe.cmake]==])" >> CTestTestfile.cmake
done

"$ctest" --show-only=json-v1 > tests.json
python3 - "$work/tests.json" "$work" <<'PY' || fail "registered tests differ (above)"
import json, sys
tests = {t["name"]: t for t in json.load(open(sys.argv[1]))["tests"]}
want = {"plain name": "plain name", "a, b [tag] c\\d": "a\\, b \\[tag\\] c\\\\d", "x; y": "x; y",
        "ops: gemm - Kokkos::OpenMP": "ops: gemm - Kokkos::OpenMP"}
ok = True
for name, spec in want.items():
    t = tests.get(name)
    if t is None:
        print("missing test:", repr(name)); ok = False; continue
    if t["command"][1:] != [spec, "--warn", "NoTests"]:
        print("wrong command for", repr(name), t["command"]); ok = False
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    if props.get("TIMEOUT") != 77.0:
        print("properties not passed on for", repr(name), props); ok = False
    labels = props.get("LABELS", [])
    if labels != (["long"] if name == "ops: gemm - Kokkos::OpenMP" else []):
        print("wrong labels for", repr(name), labels); ok = False
for exe in ("broken", "empty"):
    if exe + ": test discovery failed" not in tests:
        print("no failing test for", exe); ok = False
cross = tests.get("emulated case")
if cross is None or cross["command"] != [sys.argv[2] + "/emulate", "--cpu=x", sys.argv[2] + "/cross",
                                         "emulated case", "--warn", "NoTests"]:
    print("the emulated executable's test is not run through its emulator:", cross and cross["command"]); ok = False
extra = set(tests) - set(want) - {"broken: test discovery failed", "empty: test discovery failed", "emulated case"}
if extra:
    print("unexpected tests:", extra); ok = False
sys.exit(0 if ok else 1)
PY

# The failing tests fail, and say why.
out="$("$ctest" -R 'discovery failed' --output-on-failure 2>&1 || true)"
grep -q "2 tests failed out of 2" <<<"$out" || { echo "$out"; fail "the discovery-failure tests did not both fail"; }
grep -q "libcuda.so.1: cannot open shared object file" <<<"$out" || { echo "$out"; fail "the loader's message is not shown"; }
# The emulated executable was listed through its emulator, and its test passes through it.
grep -q '^emulated .*/cross --list-test-names-only$' calls || fail "the emulated executable was not listed through its emulator"
"$ctest" -R '^emulated case$' >/dev/null || fail "the emulated executable's test did not pass through its emulator"
# Cached: listed once above (ctest -N and the run both read the cache) until the executable changes.
listings() { grep -c "^listed $1\$" calls || true; }
[ "$(listings --list-test-names-only)" = 1 ] && [ "$(listings '\[long\]')" = 1 ] ||
  fail "the stand-in was listed $(listings --list-test-names-only) + $(listings '\[long\]') times, expected 1 + 1 (cache)"
sleep 1; touch lists; "$ctest" -N >/dev/null
[ "$(listings --list-test-names-only)" = 2 ] || fail "a changed executable was not listed again"
echo "PASS: test-time discovery registers, escapes, caches, and fails loudly"
