#!/usr/bin/env python3
"""No compilation of the build names the checkout's or the build folder's path where the compiler
cache cannot make it relative (cmake/ccache_launcher.sh, docs/testing.md#the-compiler-cache).

ccache's base_dir turns absolute paths into relative ones only where an argument is a path
(-I, -isystem, the source, -o ...). A definition such as -DDATA="/path/to/checkout/x" stays, so
every unit that carries one misses the cache in a clone at another path: CI, which compiles a
fresh clone each time, then rebuilds it. The paths the tests need are defined on one unit
(tests/support/test_paths.cpp); the commit's hash likewise on one (apps/tune_job.cpp).

Usage: relocatable_compiles.py BUILD_DIR SOURCE_DIR
Reads BUILD_DIR/compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS); prints PASS or each
offending unit and argument.
"""
import json
import os
import shlex
import sys

ALLOWED_UNITS = {"tests/support/test_paths.cpp"}


def main() -> int:
    build, source = (os.path.realpath(a) for a in sys.argv[1:3])
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        commands = json.load(f)
    if not commands:
        print(f"FAIL: {build}/compile_commands.json lists no compilation")
        return 1
    bad = []
    for c in commands:
        unit = os.path.relpath(os.path.realpath(c["file"]), source)
        args = c["arguments"] if "arguments" in c else shlex.split(c["command"])
        defines = [a for a in args if a.startswith("-D")]
        for d in defines:
            if (source in d or build in d) and unit not in ALLOWED_UNITS:
                bad.append((unit, d))
    for unit, d in bad:
        print(f"FAIL: {unit} is compiled with {d}: a path in a definition keeps a clone elsewhere "
              "from the compiler cache; define it on tests/support/test_paths.cpp (or one unit) instead")
    if bad:
        return 1
    print(f"PASS: {len(commands)} compilations, no definition names {source} or {build} "
          f"but on {', '.join(sorted(ALLOWED_UNITS))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
