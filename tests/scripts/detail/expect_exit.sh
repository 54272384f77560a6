#!/usr/bin/env bash
# A test passes on its exit status AND its output, never on one alone (tests/CMakeLists.txt's
# joule_add_test_expect). ctest's PASS_REGULAR_EXPRESSION ignores the exit status: a program that
# printed the expected text and then crashed (in MPI_Finalize, in a destructor, in a later check)
# would pass. This wrapper runs the test, shows its output as it comes, and passes only when the
# status is STATUS and the whole output matches REGEX.
#   REGEX is a CMake regular expression as ctest's properties take them ('.' also matches a newline);
#   it is matched with Perl, which reads the same syntax for what the tests use.
#   A test that exits 77 (skipped: SKIP_RETURN_CODE 77 on its entry) is passed through as 77 when
#   STATUS is not 77.
# Usage: expect_exit.sh STATUS REGEX -- COMMAND...
set -uo pipefail
[ $# -ge 4 ] && [ "$3" = -- ] && [[ "$1" =~ ^[0-9]+$ ]] || {
  echo "usage: $0 STATUS REGEX -- COMMAND..." >&2
  exit 2
}
want="$1" regex="$2"
shift 3
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$@" 2>&1 | tee "$out"
status="${PIPESTATUS[0]}"
if [ "$status" = 77 ] && [ "$want" != 77 ]; then
  echo "expect_exit: skipped (exit 77)"
  exit 77
fi
matched=no
JOULE_EXPECT_REGEX="$regex" perl -e 'local $/; my $s = <STDIN> // ""; exit($s =~ /$ENV{JOULE_EXPECT_REGEX}/s ? 0 : 1)' <"$out" &&
  matched=yes
if [ "$status" = "$want" ] && [ "$matched" = yes ]; then
  echo "expect_exit: exit $status as expected, and the output matches"
  exit 0
fi
[ "$status" = "$want" ] || echo "expect_exit: FAILED: exit $status, expected $want"
[ "$matched" = yes ] || echo "expect_exit: FAILED: no part of the output matches: $regex"
exit 1
