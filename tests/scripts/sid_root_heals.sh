#!/usr/bin/env bash
# apps/scripts/sid_root.sh's root phase after an interruption (issue 66): each way a run can stop
# half-way is recovered by the next run, with one line saying how, the root whole at the end
# (<variant> stamped with the recipe, no <variant>.partial) and the step's line in
# JOULE_CACHE_REPORT. Cases:
#   clean        a first make (cold): the base root from debootstrap and the shared packages, the
#                variant's root a copy of it plus its Kokkos; a second run does nothing (warm: no
#                apt-get, no mount); the other variant then only copies the base (no debootstrap);
#   killed-apt   the variant's apt-get install SIGKILLed half-way with the whole run (its process
#                group): the next run undoes the mounts left behind, repairs (dpkg --configure -a,
#                the install again: repaired) and does not debootstrap or copy again;
#   killed-base  the same in the base root's install: the base is repaired, then copied;
#   repair-fails the same, but dpkg --configure -a fails: the root is removed and made again from
#                the base root, said;
#   debootstrap  debootstrap stopped half-way (it fails): the next run removes what it left of the
#                base and makes it again;
#   copy         a variant's copy of the base left half-way: removed and copied again;
#   recipe       the cached root's stamp names another recipe: the packages are installed again in
#                the moved-aside root, whose compiler cache (a marker in /var/cache/ccache)
#                survives; also when that install is SIGKILLed and the next run repairs it;
#   no-stamp     a root without a stamp (the former script's interrupted install in place): repaired;
#   stuck-mount  a mount below an unfinished root that cannot be undone: the run stops, saying so,
#                and removes nothing (the host's /dev or the checkout would go with it);
#   locked       a second run of the same variant waits for the first (its lock);
#   build        the build phase reports the root's compiler cache use ("N of M compilations").
# Stand-ins, so that nothing here needs root, the network or minutes: stubs first on PATH for id
# (uid 0), debootstrap (a tiny tree whose usr/bin holds stub apt-get, dpkg, update-alternatives,
# bash and ar), chroot (runs only those, from the fake root, never a program of the host), mount
# and umount (a fake mount table, read by the script through JOULE_SID_MOUNTS); apt-get and dpkg
# of the host are stubs that fail, and must not be called. Real: sid_root.sh itself (a copy, in a
# temporary checkout), cache_step.sh, flock, setsid and SIGKILL. HOME and JOULE_SID_CACHE point into
# a temporary folder: ~/.cache/joule is never touched. About 5 s.
# Usage: sid_root_heals.sh [SID_ROOT_SH]   (default: this checkout's; another one to check this
# test against, e.g. an older script)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
source "$repo/tests/scripts/detail/interrupt.sh"  # kill_when_held
script="${1:-$repo/apps/scripts/sid_root.sh}"
work="$(mktemp -d)"
work="$(cd "$work" && pwd -P)"  # the path as a mount table would name it
trap 'rm -rf --one-file-system "$work"' EXIT
failures=0
bad() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# A temporary checkout: the script under test and the protocol it sources.
mkdir -p "$work/repo/apps/scripts/detail" "$work/home" "$work/ctl" "$work/bin" "$work/rootbin"
cp "$script" "$work/repo/apps/scripts/sid_root.sh"
cp "$repo/apps/scripts/detail/cache_step.sh" "$work/repo/apps/scripts/detail/"
cache="$work/cache"
root="$cache/kokkos45"
partial="$root.partial"
calls="$work/calls"   # every stub call, one a line
mounts="$work/mounts" # the fake mount table ("SOURCE TARGET TYPE OPTIONS 0 0")
: >"$calls"
: >"$mounts"

stub() {  # stub DIR NAME: the script on stdin, made executable, with @W@ for the work folder
  sed "s|@W@|$work|g" >"$1/$2"
  chmod +x "$1/$2"
}

# --- The host's stubs ---------------------------------------------------------------------------------
printf '#!/bin/sh\n[ "${1:-}" = -u ] && { echo 0; exit 0; }\nexec /usr/bin/id "$@"\n' | stub "$work/bin" id
for tool in apt-get dpkg sudo; do  # the host's package tools: never called
  printf '#!/bin/sh\necho "HOST %s $*" >>"@W@/calls"\nexit 1\n' "$tool" | stub "$work/bin" "$tool"
done
stub "$work/bin" debootstrap <<'EOF'
#!/bin/sh
# debootstrap --variant=minbase SUITE TARGET MIRROR: a tree with the fake root's programs.
echo "debootstrap $*" >>"@W@/calls"
t="$3"
mkdir -p "$t/etc/apt/sources.list.d" "$t/etc/apt/apt.conf.d" "$t/usr/bin" "$t/var/lib/dpkg/updates" \
  "$t/var/cache/ccache" "$t/var/lib/fake" || exit 1
if [ -e "@W@/ctl/debootstrap-fail" ]; then
  echo "E: (fake debootstrap) stopped half-way, as the test asked" >&2
  exit 1
fi
cp "@W@/rootbin/"* "$t/usr/bin/"
EOF
stub "$work/bin" chroot <<'EOF'
#!/bin/bash
# chroot DIR [/usr/bin/env -i VAR=VALUE...] COMMAND ARGS...: COMMAND is looked up in DIR only and
# run with those variables; anything not in the fake root is refused.
set -u
dir="$1"; shift
[ "${1:-}" = /usr/bin/env ] && shift
[ "${1:-}" = -i ] && shift
vars=()
while [ $# -gt 0 ] && [[ "$1" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do vars+=("$1"); shift; done
cmd="${1:?fake chroot: no command}"; shift
case "$cmd" in
  */*) candidates=("$dir$cmd") ;;
  *) candidates=("$dir/usr/local/bin/$cmd" "$dir/usr/bin/$cmd" "$dir/bin/$cmd") ;;
esac
top="$(readlink -f "$dir")"
for c in "${candidates[@]}"; do
  [ -f "$c" ] && [ -x "$c" ] || continue
  case "$(readlink -f "$c")" in
    "$top"/*) exec env -i "${vars[@]}" FAKE_ROOT="$dir" "$c" "$@" ;;
  esac
done
echo "REFUSED chroot $dir $cmd" >>"@W@/calls"
echo "fake chroot: $cmd is not in the fake root $dir (nothing of the host is run)" >&2
exit 127
EOF
stub "$work/bin" mount <<'EOF'
#!/bin/sh
# Records the mount in the fake table; an --rbind brings a mount below it, as /dev's /dev/pts.
echo "mount $*" >>"@W@/calls"
case "$1" in
  -t) src="$3" tgt="$4" ;;
  --bind | --rbind) src="$2" tgt="$3" ;;
  --make-rslave) exit 0 ;;
  *) echo "stub mount: unexpected arguments: $*" >&2; exit 1 ;;
esac
[ -d "$tgt" ] || { echo "mount: $tgt: mount point does not exist." >&2; exit 32; }
echo "$src $tgt fake rw 0 0" >>"@W@/mounts"
[ "$1" = --rbind ] && echo "$src/sub $tgt/sub fake rw 0 0" >>"@W@/mounts"
exit 0
EOF
stub "$work/bin" umount <<'EOF'
#!/bin/sh
# umount [-R] [-l] TARGET: off the fake table (with what is below it for -R); "busy" when told.
echo "umount $*" >>"@W@/calls"
rec=0
for a; do case "$a" in -R) rec=1 ;; -l) ;; *) tgt="$a" ;; esac; done
if [ -e "@W@/ctl/umount-stuck" ]; then echo "umount: $tgt: target is busy." >&2; exit 32; fi
awk -v t="$tgt" '$2 == t { f = 1 } END { exit !f }' "@W@/mounts" ||
  { echo "umount: $tgt: not mounted." >&2; exit 32; }
awk -v t="$tgt" -v r="$rec" '!($2 == t || (r == 1 && index($2, t "/") == 1))' "@W@/mounts" >"@W@/mounts.new"
mv "@W@/mounts.new" "@W@/mounts"
EOF

# --- The fake root's programs (run by the fake chroot with FAKE_ROOT set) ------------------------------
# dpkg's state: var/lib/dpkg/updates/ holds a file while packages are half set up (as dpkg's journal
# does); var/lib/fake/installed lists what apt-get installed.
stub "$work/rootbin" apt-get <<'EOF'
#!/bin/sh
echo "apt-get $*" >>"@W@/calls"
R="$FAKE_ROOT"
case "$1" in
  update | clean) exit 0 ;;
  install) shift ;;
  *) echo "fake apt-get: '$1' not handled" >&2; exit 1 ;;
esac
if [ -n "$(ls -A "$R/var/lib/dpkg/updates")" ]; then
  echo "E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem." >&2
  exit 100
fi
n=0
for p; do case "$p" in -*) ;; *) n=$((n + 1)) ;; esac; done
: >"$R/var/lib/dpkg/updates/0000"
i=0
for p; do
  case "$p" in -*) continue ;; esac
  echo "$p" >>"$R/var/lib/fake/installed"
  i=$((i + 1))
  if [ "$i" = $((n / 2)) ] && [ -e "@W@/ctl/apt-die" ] && printf ' %s ' "$*" | grep -qF " $(cat "@W@/ctl/apt-die") "; then
    # Half-way: say so with this process group (the whole run), for the test to SIGKILL it, and
    # wait for that (bounded, should the test not come).
    awk '{ print $5 }' "/proc/$$/stat" >"@W@/ctl/apt-middle.tmp" && mv "@W@/ctl/apt-middle.tmp" "@W@/ctl/apt-middle"
    k=0
    while [ "$k" -lt 1200 ]; do sleep 0.1; k=$((k + 1)); done
    echo "fake apt-get: was not killed" >&2
    exit 1
  fi
done
rm -f "$R/var/lib/dpkg/updates/0000"
EOF
stub "$work/rootbin" dpkg <<'EOF'
#!/bin/sh
echo "dpkg $*" >>"@W@/calls"
[ "$*" = "--configure -a" ] || { echo "fake dpkg: '$*' not handled" >&2; exit 1; }
if [ -e "@W@/ctl/dpkg-fail" ]; then
  echo "dpkg: error processing package libfake (--configure): dependency problems - leaving unconfigured" >&2
  exit 1
fi
rm -f "$FAKE_ROOT/var/lib/dpkg/updates/"*
EOF
printf '#!/bin/sh\necho "update-alternatives $*" >>"@W@/calls"\n' | stub "$work/rootbin" update-alternatives
printf '#!/bin/sh\necho "ar $*" >>"@W@/calls"\n' | stub "$work/rootbin" ar
stub "$work/rootbin" bash <<'EOF'
#!/bin/sh
# bash -c TEXT: recorded, not run. The build phase's TEXT ends in `ccache --print-stats > FILE`:
# FILE (under /joule, the checkout, found in the fake mount table) gets these counters.
echo "bash $(printf '%s' "$2" | head -c 40)" >>"@W@/calls"
case "$2" in
  *"ccache --print-stats > "*)
    f="$(printf '%s' "$2" | sed 's/.*ccache --print-stats > \([^ ]*\).*/\1/')"
    co="$(awk -v t="$FAKE_ROOT/joule" '$2 == t { print $1 }' "@W@/mounts" | tail -1)"
    [ -n "$co" ] || { echo "fake bash: /joule is not mounted" >&2; exit 1; }
    mkdir -p "$(dirname "$co/$f")"
    printf 'cache_miss\t1\ndirect_cache_hit\t15\ndirect_cache_miss\t2\npreprocessed_cache_hit\t4\n' >"$co/$f" ;;
esac
EOF

# --- Running the script ------------------------------------------------------------------------------
env_for_run=(HOME="$work/home" PATH="$work/bin:$PATH" JOULE_SID_CACHE="$cache"
             JOULE_SID_MIRROR=http://mirror.invalid/debian JOULE_SID_MOUNTS="$mounts" JOULE_SID_VARIANT=kokkos45)
for tool in id debootstrap chroot mount umount apt-get dpkg; do
  [ "$(PATH="$work/bin:$PATH" command -v "$tool")" = "$work/bin/$tool" ] || { echo "FAIL: the $tool stub is not first on PATH" >&2; exit 1; }
done

run() {  # run NAME [VAR=VALUE...] [-- PHASE...]: the script (phase root), output in $work/out-NAME
  local name="$1" vars=() phases=(root)
  shift
  while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then shift; phases=("$@"); break; fi
    vars+=("$1"); shift
  done
  : >"$calls"
  rm -f "$work/report-$name"
  set +e
  env "${env_for_run[@]}" JOULE_CACHE_REPORT="$work/report-$name" "${vars[@]}" \
    bash "$work/repo/apps/scripts/sid_root.sh" "${phases[@]}" >"$work/out-$name" 2>&1 </dev/null
  rc=$?
  set -e
  cp "$calls" "$work/calls-$name"
  echo "== $name (exit $rc)"; sed 's/^/   /' "$work/out-$name"
}
expect() {  # expect NAME REGEX: a line of run NAME's output matches
  grep -Eq -- "$2" "$work/out-$1" || bad "$1: no line matches '$2'"
}
called() {  # called NAME REGEX: a stub call of run NAME matches
  grep -Eq -- "$2" "$work/calls-$1" || bad "$1: no call matches '$2' (calls: $(tr '\n' ';' <"$work/calls-$1"))"
}
not_called() {
  ! grep -Eq -- "$2" "$work/calls-$1" || bad "$1: a call matches '$2': $(grep -E -- "$2" "$work/calls-$1" | head -3 | tr '\n' ';')"
}
before() {  # before NAME REGEX1 REGEX2: the first call matching REGEX1 comes before the first matching REGEX2
  local a b
  a="$(grep -nE -- "$2" "$work/calls-$1" | head -1 | cut -d: -f1 || true)"  # (none: grep fails)
  b="$(grep -nE -- "$3" "$work/calls-$1" | head -1 | cut -d: -f1 || true)"
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ] || bad "$1: '$2' is not called before '$3'"
}
reported() {  # reported NAME STATE DETAIL-REGEX [ROOT]: run NAME's report line for the sid root (kokkos45)
  grep -Eq "^sid root ${4:-kokkos45}	$2	$3\$" "$work/report-$1" 2>/dev/null ||
    bad "$1: report is not 'sid root ${4:-kokkos45} $2 $3': $(tr '\t\n' ' ;' <"$work/report-$1" 2>/dev/null)"
}
whole() {  # whole NAME: exit 0, the root stamped with this recipe, no partial, no mount left, nothing of the host run
  [ "$rc" = 0 ] || bad "$1: exit $rc"
  [ -f "$root/.joule-stamp" ] && [ "$(cat "$root/.joule-stamp")" = "$stamp" ] ||
    bad "$1: $root's stamp is '$(cat "$root/.joule-stamp" 2>/dev/null)', not the recipe's"
  [ ! -e "$partial" ] || bad "$1: $partial is left"
  [ ! -e "$root/var/lib/dpkg/updates/0000" ] || bad "$1: dpkg is left interrupted in $root"
  [ ! -s "$mounts" ] || bad "$1: mounts left: $(tr '\n' ';' <"$mounts")"
  not_called "$1" '^(HOST|REFUSED)'
}

# kill_during_apt NAME PACKAGE: a run (setsid: its own process group) whose apt-get install is
# SIGKILLed half-way, with all of the run's processes; leaves what a killed CI job leaves. The install
# killed is the first to name PACKAGE: the variant's Kokkos for its root, a shared one for the base.
kill_during_apt() {
  local name="$1" pgid mine
  : >"$calls"
  rm -f "$work/ctl/apt-middle"
  echo "$2" >"$work/ctl/apt-die"
  kill_when_held "$work/ctl/apt-middle" "$work/out-$name" "$work/out-$name" \
    env "${env_for_run[@]}" bash "$work/repo/apps/scripts/sid_root.sh" root ||
    { echo "FAIL: $name: apt-get install was not killed in its middle" >&2; sed 's/^/   /' "$work/out-$name" >&2; exit 1; }
  # The stand-in apt-get wrote its own process group: the one killed, never this test's.
  pgid="$(tr -d ' ' <"$work/ctl/apt-middle")"
  mine="$(awk '{ print $5 }' /proc/$$/stat)"
  [ "$pgid" = "$KILLED_PGID" ] && [ "$pgid" != "$mine" ] ||
    { echo "FAIL: $name: apt-get ran in process group '$pgid', the run's is '$KILLED_PGID', this test's '$mine'" >&2; exit 1; }
  rm -f "$work/ctl/apt-die" "$work/ctl/apt-middle"
  cp "$calls" "$work/calls-$name"
  echo "== $name (SIGKILLed in apt-get install)"; sed 's/^/   /' "$work/out-$name"
  [ -f "$work/mounts" ] && [ -s "$work/mounts" ] || bad "$name: a killed run should leave its mounts"
}

fresh_root() {  # fresh_root: a whole root, made cleanly
  rm -rf --one-file-system "$cache"
  : >"$mounts"
  run "fresh-$1"
  [ "$rc" = 0 ] && [ -f "$root/.joule-stamp" ] || { echo "FAIL: could not make a clean root for $1" >&2; exit 1; }
}

# --- clean, then warm --------------------------------------------------------------------------------
run clean
stamp="$(cat "$root/.joule-stamp" 2>/dev/null || true)"
# The stamp's text is the one roots already cached were made with (recipe 3): they stay warm.
[[ "$stamp" == "recipe 3; packages g++ cmake make pkg-config "*" ccache libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev" ]] ||
  bad "clean: the stamp '$stamp' is not recipe 3's text"
whole clean
called clean '^debootstrap --variant=minbase trixie .*/base\.partial '
called clean '^apt-get install .*libtrilinos-kokkos-dev'
called clean '^update-alternatives --quiet --set libblas.so.3'
called clean '^umount -R '
before clean '^debootstrap' '^apt-get install .*libtrilinos-kokkos-dev'
grep -qx libtrilinos-kokkos-kernels-dev "$root/var/lib/fake/installed" 2>/dev/null || bad "clean: the packages are not installed in the root"
grep -qx procps "$cache/base/var/lib/fake/installed" 2>/dev/null && ! grep -q kokkos "$cache/base/var/lib/fake/installed" ||
  bad "clean: the base root should have the shared packages and no Kokkos"
[[ "$(cat "$cache/base/.joule-stamp" 2>/dev/null)" == "recipe 3; packages g++ "*" ccache" ]] ||
  bad "clean: the base root's stamp is '$(cat "$cache/base/.joule-stamp" 2>/dev/null)', not the shared packages' recipe"
[ ! -e "$cache/base.partial" ] || bad "clean: base.partial is left"
expect clean 'copying the base root .*/base to .*kokkos45\.partial'
reported clean cold 'made from the base root'
reported clean cold 'made from debootstrap' base

run warm
whole warm
expect warm 'root .* is current'
not_called warm '^(debootstrap|apt-get|dpkg|mount)'
reported warm warm ''

# The other variant: a copy of the base root and its own Kokkos, no debootstrap.
run other-variant JOULE_SID_VARIANT=kokkos52
[ "$rc" = 0 ] && [ -f "$cache/kokkos52/.joule-stamp" ] || bad "other-variant: exit $rc, or no stamped kokkos52 root"
not_called other-variant '^debootstrap'
called other-variant '^apt-get install .*libkokkos-dev'
not_called other-variant '^(HOST|REFUSED)'
! grep -q trilinos "$cache/kokkos52/var/lib/fake/installed" || bad "other-variant: kokkos52 got kokkos45's packages"
reported other-variant warm '' base
reported other-variant cold 'made from the base root' kokkos52

# --- apt-get install killed, then repaired -----------------------------------------------------------
rm -rf --one-file-system "$cache"; : >"$mounts"
kill_during_apt killed-apt libtrilinos-kokkos-dev
[ ! -f "$root/.joule-stamp" ] || bad "killed-apt: a killed install left $root stamped"
[ -e "$partial/var/lib/dpkg/updates/0000" ] || [ -e "$root/var/lib/dpkg/updates/0000" ] ||
  bad "killed-apt: the killed apt-get did not leave dpkg interrupted (the test's stand-in is wrong)"
run repair
whole repair
expect repair "undoing [0-9]+ mount\(s\) left below .*kokkos45(\.partial)? by an interrupted run"
expect repair 'repairing .*: dpkg --configure -a, then the install again'
called repair '^dpkg --configure -a$'
before repair '^umount' '^mount'
before repair '^dpkg --configure -a' '^apt-get install'
called repair '^apt-get install .*--fix-broken'
not_called repair '^debootstrap'
reported repair repaired 'dpkg repaired'
! grep -q '^sid root base' "$work/report-repair" || bad "repair: the base root was looked at, though nothing was copied from it"

# --- the base root's apt-get install killed, then repaired, then copied -------------------------------
rm -rf --one-file-system "$cache"; : >"$mounts"
kill_during_apt killed-base procps
[ ! -e "$root" ] && [ ! -e "$partial" ] || bad "killed-base: the variant's root was begun before the base was whole"
[ -e "$cache/base.partial/var/lib/dpkg/updates/0000" ] || bad "killed-base: the killed apt-get did not leave dpkg interrupted in base.partial"
run repair-base
whole repair-base
expect repair-base "undoing [0-9]+ mount\(s\) left below .*base\.partial by an interrupted run"
expect repair-base 'repairing .*base\.partial, left unfinished by an interrupted run'
before repair-base '^dpkg --configure -a' '^apt-get install .*libtrilinos-kokkos-dev'
not_called repair-base '^debootstrap'
[ ! -e "$cache/base.partial" ] && [ -f "$cache/base/.joule-stamp" ] || bad "repair-base: the base root is not whole"
reported repair-base repaired 'dpkg repaired' base
reported repair-base cold 'made from the base root'

# --- the repair fails: remade from debootstrap --------------------------------------------------------
rm -rf --one-file-system "$cache"; : >"$mounts"
kill_during_apt killed-apt-2 libtrilinos-kokkos-dev
touch "$work/ctl/dpkg-fail"
run repair-fails
rm -f "$work/ctl/dpkg-fail"
whole repair-fails
expect repair-fails 'dpkg --configure -a failed'
expect repair-fails 'the repair failed \(apt-get install in the root failed .*\): removing .*kokkos45\.partial and making it again from the base root'
expect repair-fails 'copying the base root'
not_called repair-fails '^debootstrap'
grep -q "E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem." "$cache/kokkos45.apt.log" ||
  bad "repair-fails: apt's 'dpkg was interrupted' is not in the apt log"
reported repair-fails repaired 'remade after a failed repair'

# --- debootstrap stopped half-way ---------------------------------------------------------------------
rm -rf --one-file-system "$cache"; : >"$mounts"
touch "$work/ctl/debootstrap-fail"
run debootstrap-stops
rm -f "$work/ctl/debootstrap-fail"
[ "$rc" != 0 ] || bad "debootstrap-stops: exit 0 when debootstrap failed"
expect debootstrap-stops 'ERROR: debootstrap failed'
[ -d "$cache/base.partial" ] && [ ! -e "$cache/base" ] && [ ! -e "$root" ] && [ ! -e "$partial" ] ||
  bad "debootstrap-stops: expected only base.partial to be left"
run debootstrap-remade
whole debootstrap-remade
expect debootstrap-remade 'removing .*base\.partial, left by an interrupted debootstrap: making it again'
called debootstrap-remade '^debootstrap --variant=minbase'
reported debootstrap-remade repaired 'remade after an interrupted debootstrap' base
reported debootstrap-remade cold 'made from the base root'

# --- a copy of the base root left half-way (the run killed in cp) --------------------------------------
rm -rf --one-file-system "$root"
mkdir -p "$partial/usr/bin" "$partial/var/lib"  # part of the copy: no debootstrapped mark yet
cp "$cache/base/usr/bin/apt-get" "$partial/usr/bin/"
run copy-remade
whole copy-remade
expect copy-remade 'removing .*kokkos45\.partial, left by an interrupted copy of the base root: making it again'
not_called copy-remade '^debootstrap'
reported copy-remade repaired 'remade after an interrupted copy'
reported copy-remade warm '' base

# --- another recipe: installed again in the moved-aside root, its compiler cache kept ------------------
fresh_root recipe
echo kept >"$root/var/cache/ccache/marker"
sed -i 's/^recipe 3;/recipe 2;/' "$root/.joule-stamp"
run recipe
whole recipe
expect recipe 'made by another recipe .*installing the packages again'
not_called recipe '^debootstrap'
called recipe '^apt-get install'
[ "$(cat "$root/var/cache/ccache/marker" 2>/dev/null)" = kept ] || bad "recipe: the root's compiler cache was not kept"
reported recipe cold 'recipe changed.*compiler cache kept'
# ... and that install killed half-way: repaired, the compiler cache still there.
sed -i 's/^recipe 3;/recipe 2;/' "$root/.joule-stamp"
kill_during_apt recipe-killed libtrilinos-kokkos-dev
run recipe-repair
whole recipe-repair
expect recipe-repair 'repairing .*: dpkg --configure -a'
not_called recipe-repair '^debootstrap'
[ "$(cat "$root/var/cache/ccache/marker" 2>/dev/null)" = kept ] || bad "recipe-repair: the root's compiler cache was not kept"
reported recipe-repair repaired 'dpkg repaired'
# JOULE_SID_REFRESH=1 on a current root: the same, in place of a remake.
run refresh JOULE_SID_REFRESH=1
whole refresh
not_called refresh '^debootstrap'
called refresh '^apt-get install'
[ "$(cat "$root/var/cache/ccache/marker" 2>/dev/null)" = kept ] || bad "refresh: the root's compiler cache was not kept"
reported refresh cold 'packages refreshed.*'

# --- a root without a stamp (the former script's install, interrupted in place) ------------------------
fresh_root no-stamp
rm -f "$root/.joule-stamp"
: >"$root/var/lib/dpkg/updates/0000"
run no-stamp
whole no-stamp
expect no-stamp 'has no stamp'
called no-stamp '^dpkg --configure -a$'
not_called no-stamp '^debootstrap'
reported no-stamp repaired 'dpkg repaired'

# --- a mount that cannot be undone: nothing removed ---------------------------------------------------
rm -rf --one-file-system "$cache"; : >"$mounts"
mkdir -p "$partial/dev"
echo precious >"$partial/dev/host-file"  # stands for the host's /dev, bound there by a killed run
echo "/dev $partial/dev fake rw 0 0" >"$mounts"
touch "$work/ctl/umount-stuck"
run stuck-mount
rm -f "$work/ctl/umount-stuck"
[ "$rc" != 0 ] || bad "stuck-mount: exit 0 with a mount it could not undo"
expect stuck-mount "ERROR: .*kokkos45\.partial/dev is (still mounted|mounted).*umount -R -l"
[ "$(cat "$partial/dev/host-file" 2>/dev/null)" = precious ] || bad "stuck-mount: what was mounted below the root was removed"
not_called stuck-mount '^debootstrap'
run stuck-mount-undone
whole stuck-mount-undone
expect stuck-mount-undone 'undoing 1 mount\(s\) left below .*kokkos45\.partial'
reported stuck-mount-undone repaired 'remade after an interrupted copy'

# --- one run per variant: a second run waits for the first (here, a holder of its lock) -------------
wait_for() {  # wait_for WHAT COMMAND...: until COMMAND succeeds (polled; 90 s at most)
  local what="$1" t0=$SECONDS
  shift
  until "$@"; do
    [ $((SECONDS - t0)) -le 90 ] || { echo "FAIL: $what did not happen in 90 s" >&2; exit 1; }
    sleep 0.05
  done
}
rm -f "$work/ctl/held" "$work/ctl/release"
flock "$cache/kokkos45.lock" bash -c 'touch "$1/held"; until [ -e "$1/release" ] || [ ! -d "$1" ]; do sleep 0.05; done' _ "$work/ctl" &
holder=$!
wait_for "the lock's holder" test -e "$work/ctl/held"
env "${env_for_run[@]}" bash "$work/repo/apps/scripts/sid_root.sh" root >"$work/out-locked" 2>&1 </dev/null &
second=$!
wait_for "the second run's wait" grep -q 'waiting for it' "$work/out-locked"
kill -0 "$second" 2>/dev/null || bad "locked: the second run did not wait for the lock"
touch "$work/ctl/release"
wait "$holder" || true
rc=0; wait "$second" || rc=$?
echo "== locked (exit $rc)"; sed 's/^/   /' "$work/out-locked"
[ "$rc" = 0 ] || bad "locked: exit $rc once the lock was free"
expect locked 'another sid_root.sh run of kokkos45 is using .*: waiting for it'
expect locked 'root .* is current'

# --- the build phase's compiler cache report ----------------------------------------------------------
run build -- build
[ "$rc" = 0 ] || bad "build: exit $rc"
expect build 'compiler cache: 19 of 20 compilations from the cache'
grep -Eq "^sid kokkos45 compiler cache	warm	19 of 20 compilations from the cache\$" "$work/report-build" 2>/dev/null ||
  bad "build: report is '$(tr '\t\n' ' ;' <"$work/report-build" 2>/dev/null)'"
[ ! -s "$mounts" ] || bad "build: mounts left: $(tr '\n' ';' <"$mounts")"
not_called build '^(HOST|REFUSED)'

if [ "$failures" != 0 ]; then
  echo "FAIL: $failures check(s) failed (see above)" >&2
  exit 1
fi
echo "PASS: sid_root.sh's root heals after an interrupted apt-get (in the variant's root and in the base root), dpkg repair, debootstrap, copy of the base, recipe change and stale mounts ($SECONDS s)"
