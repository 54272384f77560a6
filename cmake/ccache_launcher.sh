#!/usr/bin/env bash
# The compiler launcher of joule's host builds (CMAKE_<LANG>_COMPILER_LAUNCHER; make build,
# build-sanitize, test-aarch64): ccache, set up so that a fresh clone of the same commit anywhere on
# the machine hits the cache that another clone filled (CI compiles in a new clone each time):
#   base_dir   this checkout: the absolute paths into it on the command line become relative
#   hash_dir   off: the build folder's path (in -g's debug info) is not part of the key
#   sloppiness the precompiled headers of the test programs (pch_defines, time_macros) and the
#              fresh clone's new file times (include_file_mtime, include_file_ctime)
# A CCACHE_* setting of the caller's wins. JOULE_CCACHE=off (make) configures builds without it.
# Usage: ccache_launcher.sh COMPILER ARGS...
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$here}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
exec ccache "$@"
