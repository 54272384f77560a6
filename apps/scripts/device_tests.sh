# Sourced by device_bundle.sh and device_check.sh: which tests the device check runs, and in which
# test executables they are. One place for both, so that the bundle holds what the check runs.
#   device_tests_re        step 1 (tests_gpu): ordering and bitwise offload (JOULE_DEVICE_TESTS)
#   device_more_re         tests_more: the operator tests (JOULE_DEVICE_MORE_TESTS)
#   device_test_targets RE the test executables (joule_add_test targets) whose tests/*.cpp name a
#                          test case matching RE on its first line, space-separated
#   device_run_tests RE EXCLUDE_RE EXE...
#                          runs, in each prebuilt test executable, the test cases whose names match
#                          RE and not EXCLUDE_RE (as ctest -R RE -E EXCLUDE_RE would select them),
#                          without ctest and its build tree; fails when one fails or none matched
device_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
device_tests_re="${JOULE_DEVICE_TESTS:-ordering|offload|bitwise|same bits}"
device_more_re="${JOULE_DEVICE_MORE_TESTS:-linear|layernorm|gelu|residual|embedding|patch|attention|cross entropy|adamw|block}"

device_test_targets() {
  local re="$1" f t found=()
  for f in $(grep -lE "TEST_CASE\(\"[^\"]*($re)" "$device_repo"/tests/*.cpp 2>/dev/null); do
    t="$(sed -n -E "s/^ *joule_add_test\(([A-Za-z0-9_]+) ([^)]* )?$(basename "$f")[ )].*/\1/p" "$device_repo/tests/CMakeLists.txt" | head -1)"
    [ -n "$t" ] && found+=("$t")
  done
  [ ${#found[@]} = 0 ] || printf '%s\n' "${found[@]}" | sort -u | paste -sd' '
}

# Catch2 v2 or v3 (v3 refuses v2's --list-test-names-only and --warn NoTests).
catch_is_v2() { "$1" --help 2>/dev/null | grep -q -- --list-test-names-only; }
# The test case names of a Catch2 executable, one per line: v2's --list-test-names-only, or v3's
# --list-tests --verbosity quiet.
catch_test_names() {
  if catch_is_v2 "$1"; then "$1" --list-test-names-only 2>/dev/null || true
  else "$1" --list-tests --verbosity quiet 2>/dev/null || true; fi
}

device_run_tests() {
  local re="$1" exclude="$2" exe names spec rc=0 ran=0
  shift 2
  for exe in "$@"; do
    names="$(catch_test_names "$exe" | grep -E -- "$re" | { [ -n "$exclude" ] && grep -vE -- "$exclude" || cat; })"
    [ -n "$names" ] || continue
    # One spec for all of them: names OR-ed by commas, Catch2's , [ ] \ escaped in each.
    spec="$(printf '%s\n' "$names" | sed -e 's/[],[\\]/\\&/g' | paste -sd,)"
    echo "== $(basename "$exe"): $(printf '%s\n' "$names" | wc -l) test cases"
    # A spec that matches nothing fails the run: v2's NoTests, v3's UnmatchedTestSpec.
    if catch_is_v2 "$exe"; then "$exe" "$spec" --warn NoTests || rc=1
    else "$exe" "$spec" --warn UnmatchedTestSpec || rc=1; fi
    ran=1
  done
  [ $ran = 1 ] || { echo "no test case matches /$re/ in: $*"; return 1; }
  return $rc
}
