# shellcheck shell=bash disable=SC2154
# (SC2154: $base, $python and the others are set by shared_folder_attacks.sh, which sources this file.)
# Sourced by tests/scripts/shared_folder_attacks.sh: its attacks against the Python scripts of
# apps/scripts (plot_run.py, plot_run_layout.py, images_to_h5.py; they write through joule_write.py),
# each reproduced as root with a second, unprivileged user. Uses that file's helpers: `as UID CMD...`,
# `fail MSG`, $base (0755, the working directory), $attacker_uid, $python and $src (the source tree
# whose apps/scripts are tested). Each case makes its own folders under $base, so that it leaves
# nothing in the shared $sticky and $open that the other cases look at.
#   plot_probe      links planted at .joule-write-probe-<pid> for the next 1500 process ids in the
#                   default plot folder (<stem>-plots), made first by the attacker (0755) in a sticky
#                   folder: root's 0600 file is not emptied. The scripts, like joule (issue 64),
#                   refuse a folder of another user on the way; accepted (JOULE_ACCEPT_SHARED_FOLDER=1)
#                   they write there with no probe file (a private temporary of a random name)
#   plot_chmod      the attacker's plot folder with a planted 0777 loss.png, and a watcher (the
#                   attacker) swapping every temporary file it sees there for a link to a root-only
#                   0600 file: that file keeps its mode and content. Refused for the folder, then
#                   (accepted) for the attacker's loss.png; with JOULE_REPLACE_OTHERS_FILES=1 too the
#                   plot is written in a private folder the watcher cannot enter and stays root's
#                   (0755: the old mode less others' write bits, set on its descriptor)
#   converter_link  the attacker's link at root's converter output name in a sticky folder, to a
#                   root-only file: the link itself is replaced by the dataset, the file untouched
#   describe_link   the same at plot_run.py --describe FILE, in a sticky folder of root's and in a
#                   folder of the attacker's there (refused; accepted: the link replaced)
# scripts_attack_setup makes their inputs in $base/scripts-in: a small run log (a /train loss curve:
# loss.png is plotted, the other plots skipped), four PNGs and a captions file. $joule is not needed.

scripts_attack_setup() {
  mkdir -p "$base/scripts-in/img" && chmod -R 755 "$base/scripts-in"
  "$python" - "$base/scripts-in" <<'PY' || fail "scripts: the inputs could not be made"
import sys

import h5py
import numpy as np
from PIL import Image

folder = sys.argv[1]
with h5py.File(f"{folder}/run.h5", "w") as f:
    f.attrs["format"] = "joule-run-log-v1"
    train = f.create_group("train")
    train["step"] = np.arange(1, 41, dtype=np.int64)
    train["loss"] = np.linspace(5.0, 1.0, 40) + 0.1 * np.sin(np.arange(40))
    train.attrs["complete"] = 1
rng = np.random.RandomState(7)
with open(f"{folder}/caps.tsv", "w") as f:
    for i in range(4):
        Image.fromarray(rng.randint(0, 256, size=(4, 4, 3), dtype=np.uint8), "RGB").save(f"{folder}/img/p{i}.png")
        f.write(f"p{i}.png\tpicture {i}\n")
PY
  # The attacker's programs, where the attacker can read them.
  cat >"$base/scripts-plant.py" <<'PY'
import os, sys
target, folder = sys.argv[1], sys.argv[2]
first = int(open("/proc/sys/kernel/ns_last_pid").read()) + 1
for n in range(first, first + 1500):
    os.symlink(target, "%s/.joule-write-probe-%d" % (folder, n))
PY
  # Swaps every file whose name starts with a dot in FOLDER (and in the folders there it can list)
  # for a link to TARGET, polling as fast as it can, until STOP exists or SECONDS pass.
  cat >"$base/scripts-swap.py" <<'PY'
import os, sys, time
folder, target, stop, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
swapped, seen_folders = [], set()
def sweep(path):
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for e in entries:
        if not e.name.startswith(".") or e.name.startswith(".moved-"):
            continue
        try:
            if e.is_dir(follow_symlinks=False):
                seen_folders.add(e.name)
                sweep(e.path)
            elif e.is_file(follow_symlinks=False):
                os.rename(e.path, os.path.join(folder, ".moved-%d" % len(swapped)))
                os.symlink(target, e.path)
                swapped.append(e.name)
        except OSError:
            pass
print("watching", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end and not os.path.exists(stop):
    sweep(folder)
print("%d swaps (%s); private folders seen, not entered: %d" % (len(swapped), " ".join(swapped[:3]), len(seen_folders)))
PY
}

# scripts_secret FILE: a root-only file (0600) with known text; scripts_secret_intact FILE: still so.
scripts_secret() { echo "root's secret" >"$1" && chmod 600 "$1"; }
scripts_secret_intact() { echo "root's secret" | cmp -s - "$1" && [ "$(stat -c %a:%u "$1")" = 600:0 ]; }

# plot SECRET EXPECTED_EXIT PATTERN ARGS...: root's plot_run.py run, which must leave SECRET as it
# was, exit EXPECTED_EXIT and print PATTERN (grep -E).
scripts_plot() {
  local secret="$1" want="$2" pattern="$3" rc=0
  shift 3
  PYTHONDONTWRITEBYTECODE=1 "$python" "$src/apps/scripts/plot_run.py" "$@" >"$base/scripts-out.txt" 2>&1 </dev/null || rc=$?
  scripts_secret_intact "$secret" ||
    fail "root's 0600 file is now mode $(stat -c %a "$secret"), $(stat -c %s "$secret") bytes (plot_run.py $*: exit $rc)"
  [ $rc = "$want" ] && grep -qE -- "$pattern" "$base/scripts-out.txt" ||
    fail "plot_run.py $*: exit $rc (want $want, '$pattern'): $(tail -3 "$base/scripts-out.txt")"
}

# --- plot_probe: links at every likely probe name in the default plot folder ----------------------
case_plot_probe() {
  local dir="$base/scripts-sticky-probe" secret="$base/scripts-secret-probe"
  mkdir -m 1777 "$dir" && scripts_secret "$secret" && cp "$base/scripts-in/run.h5" "$dir/run.h5" ||
    fail "plot_probe: setup"
  as "$attacker_uid" mkdir -m 755 "$dir/run-plots" || fail "plot_probe: the attacker could not make the plot folder"
  as "$attacker_uid" "$python" "$base/scripts-plant.py" "$secret" "$dir/run-plots" || fail "plot_probe: planting failed"
  [ "$(ls -A "$dir/run-plots" | grep -c '^\.joule-write-probe-')" = 1500 ] || fail "plot_probe: the links are not there"
  ( scripts_plot "$secret" 2 "belongs to user $attacker_uid" "$dir/run.h5" ) || fail "plot_probe: refused"
  ( JOULE_ACCEPT_SHARED_FOLDER=1 scripts_plot "$secret" 0 "run-plots/loss.png" "$dir/run.h5" ) || fail "plot_probe: accepted"
  echo "ok: plot_probe: 1500 planted probe links; the attacker's plot folder refused, then (accepted) loss.png" \
       "written there; root's 0600 file unchanged"
}

# --- plot_chmod: the temporaries swapped for links while the plot is drawn ------------------------
case_plot_chmod() {
  local dir="$base/scripts-sticky-chmod" secret="$base/scripts-secret-chmod" watcher plots
  plots="$dir/run-plots"
  mkdir -m 1777 "$dir" && scripts_secret "$secret" && cp "$base/scripts-in/run.h5" "$dir/run.h5" ||
    fail "plot_chmod: setup"
  as "$attacker_uid" bash -c 'umask 022; mkdir "$1" && echo planted >"$1/loss.png" && chmod 777 "$1/loss.png"' _ \
    "$plots" || fail "plot_chmod: the attacker could not plant loss.png"
  rm -f "$base/scripts-stop"
  as "$attacker_uid" "$python" "$base/scripts-swap.py" "$plots" "$secret" "$base/scripts-stop" 120 \
    >"$base/scripts-watcher.txt" 2>&1 </dev/null &
  watcher=$!
  for _ in $(seq 600); do grep -qs watching "$base/scripts-watcher.txt" && break; sleep 0.1; done
  grep -qs watching "$base/scripts-watcher.txt" || fail "plot_chmod: the watcher did not start"
  ( scripts_plot "$secret" 2 "belongs to user $attacker_uid" "$dir/run.h5" ) || fail "plot_chmod: refused"
  ( JOULE_ACCEPT_SHARED_FOLDER=1 scripts_plot "$secret" 2 "loss.png: it is a file of user $attacker_uid" "$dir/run.h5" ) ||
    fail "plot_chmod: the attacker's loss.png"
  ( JOULE_ACCEPT_SHARED_FOLDER=1 JOULE_REPLACE_OTHERS_FILES=1 scripts_plot "$secret" 0 "run-plots/loss.png" "$dir/run.h5" ) ||
    fail "plot_chmod: accepted"
  touch "$base/scripts-stop"; wait "$watcher" || true
  [ -f "$plots/loss.png" ] && [ ! -L "$plots/loss.png" ] && [ "$(head -c 4 "$plots/loss.png" | tail -c 3)" = PNG ] &&
    [ "$(stat -c %a:%u "$plots/loss.png")" = 755:0 ] || fail "plot_chmod: loss.png is not root's new plot: $(ls -l "$plots")"
  echo "ok: plot_chmod: watcher: $(tail -1 "$base/scripts-watcher.txt"); refused for the folder, then for the" \
       "attacker's loss.png; replaced with both variables, root's 0755; root's 0600 file unchanged each time"
}

# --- converter_link: a link at root's converter output ---------------------------------------------
case_converter_link() {
  local dir="$base/scripts-sticky-converter" secret="$base/scripts-secret-converter"
  mkdir -m 1777 "$dir" && scripts_secret "$secret" || fail "converter_link: setup"
  as "$attacker_uid" ln -s "$secret" "$dir/data.h5" || fail "converter_link: the link could not be planted"
  PYTHONDONTWRITEBYTECODE=1 "$python" "$src/apps/scripts/images_to_h5.py" "$base/scripts-in/img" "$base/scripts-in/caps.tsv" \
    "$dir/data.h5" --image-size 4 --text-len 12 >"$base/scripts-out.txt" 2>&1 </dev/null ||
    fail "converter_link: images_to_h5.py failed: $(tail -3 "$base/scripts-out.txt")"
  scripts_secret_intact "$secret" || fail "converter_link: root's file was replaced through the link ($(stat -c %a:%s "$secret"))"
  [ -f "$dir/data.h5" ] && [ ! -L "$dir/data.h5" ] || fail "converter_link: the planted link is still at the output"
  "$python" -c 'import sys, h5py; sys.exit(int(h5py.File(sys.argv[1], "r").attrs["count"]) != 4)' "$dir/data.h5" ||
    fail "converter_link: the output is not the dataset"
  echo "ok: converter_link: the planted link replaced by root's dataset ($(stat -c %a:%u "$dir/data.h5")), root's file unchanged"
}

# --- describe_link: a link at --describe FILE --------------------------------------------------------
case_describe_link() {
  local dir="$base/scripts-sticky-describe" secret="$base/scripts-secret-describe" file
  local plots="$base/scripts-describe-plots"
  mkdir -m 1777 "$dir" && scripts_secret "$secret" || fail "describe_link: setup"
  as "$attacker_uid" bash -c 'mkdir -m 755 "$1/reports" && ln -s "$2" "$1/describe.json" && ln -s "$2" "$1/reports/describe.json"' _ \
    "$dir" "$secret" || fail "describe_link: the links could not be planted"
  ( scripts_plot "$secret" 0 "loss.png" "$base/scripts-in/run.h5" --out "$plots" --describe "$dir/describe.json" ) ||
    fail "describe_link: in the sticky folder"
  ( scripts_plot "$secret" 1 "--describe .*reports/describe.json: cannot write: .*belongs to user $attacker_uid" \
      "$base/scripts-in/run.h5" --out "$plots" --describe "$dir/reports/describe.json" ) || fail "describe_link: refused"
  ( JOULE_ACCEPT_SHARED_FOLDER=1 scripts_plot "$secret" 0 "loss.png" "$base/scripts-in/run.h5" --out "$plots" \
      --describe "$dir/reports/describe.json" ) || fail "describe_link: accepted"
  for file in "$dir/describe.json" "$dir/reports/describe.json"; do
    [ -f "$file" ] && [ ! -L "$file" ] && grep -q '"plots"' "$file" || fail "describe_link: $file is not the summary"
  done
  echo "ok: describe_link: the planted link replaced by the summary in the sticky folder; in the attacker's folder" \
       "refused, then (accepted) replaced; root's file unchanged"
}
