#!/usr/bin/env bash
# The checks joule makes before any work, end to end through the command:
#   1. command-line values are judged by the range of the configuration field they replace, and a
#      bad one is an error naming the flag and the range (-1 is no longer "not given");
#   2. an unknown subcommand is named, with the subcommands there are (joule, joule data, joule energy);
#   3. no output overwrites an input (train, tune, data synth, plot_run.py), through symlinks and
#      hard links too; resuming the checkpoint the run goes on writing is allowed;
#   4. outputs' folders are checked (missing, a folder as output path, read-only) before training;
#   5. joule inspect warns about a log whose chosen trial has non-finite figures, never "nan%", and
#      refuses flags it would ignore (--objective without --replay, --csv with it);
#   6. a model that cannot fit in the memory free is refused before anything is allocated, with the
#      figures and the nearest configuration that fits; a run that fits says what it will use;
#   7. --help is joule's (usage line first, no Kokkos options; --kokkos-help lists those), and
#      joule caption's inputs and outputs are checked before any model is built.
#   (4, read-only folders: the part read-only-folders, run as its own test.)
# usage: cli_checks.sh JOULE REPO_DIR WORK_DIR SMALL_MODEL_CONFIG [all|read-only-folders]
set -euo pipefail
joule="$1" repo="$2" work="$3" small_config="$4"  # a small model for the runs that must train
part="${5:-all}"
py=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

# refused REGEX joule-args...: the command fails, says REGEX (grep -E), and did no work first (no
# model built, no dataset written, no tuning started).
refused() {
  local pattern="$1" rc=0
  shift
  "$joule" "$@" >out.txt 2>&1 || rc=$?
  [ $rc != 0 ] || fail "joule $* succeeded: $(cat out.txt)"
  grep -qE -- "$pattern" out.txt || fail "joule $*: expected /$pattern/, got: $(cat out.txt)"
  if grep -qE "^training: |== summary ==|wrote [0-9]+ (synthetic )?samples|^tuning " out.txt; then
    fail "joule $*: work started before the error: $(cat out.txt)"
  fi
  echo "refused: joule $* -> $(grep -E -- "$pattern" out.txt | head -1)"
}
unchanged() { sha256sum -c --quiet sums.txt || fail "$1: an input was changed"; }

# Read-only folders (the part read-only-folders, its own ctest entry): root writes anyway, so the
# check runs as user nobody where this is root; skipped (exit 77) only where root cannot run joule
# as another user.
read_only_folders() {
  mkdir ro && chmod 555 ro
  as_user=()
  if [ "$(id -u)" = 0 ]; then
    as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
    command -v setpriv >/dev/null && "${as_user[@]}" "$joule" --version >/dev/null 2>&1 || {
      echo "SKIP: read-only folders (running as root, and joule cannot run as user nobody here)"
      exit 77
    }
  fi
  for cmd in "train --data data.h5 --steps 1 --checkpoint ro/ckpt.h5" "tune --data data.h5 --out ro/sub/run.h5" \
             "data synth --count 8 --out ro/s.h5"; do
    rc=0
    # shellcheck disable=SC2086
    "${as_user[@]}" "$joule" $cmd >out.txt 2>&1 || rc=$?
    [ $rc != 0 ] && grep -qE "(--checkpoint ro/ckpt\.h5|--out ro/sub/run\.h5|--out ro/s\.h5): cannot write in the folder ro: cannot create a temporary folder in ro \(Permission denied\)" out.txt ||
      fail "joule $cmd in a read-only folder: exit $rc, $(cat out.txt)"
    grep -q "^training: " out.txt && fail "joule $cmd: training started: $(cat out.txt)"
    echo "refused: joule $cmd -> $(head -1 out.txt)"
  done
  [ -z "$(ls -A ro)" ] || fail "something was written in ro: $(ls -A ro)"
  [ -z "$(find . -name '.joule-write-probe-*')" ] || fail "probe files left behind: $(find . -name '.joule-write-probe-*')"
  echo "PASS: read-only folders refused${as_user:+ (run as user nobody)}"
}

"$joule" data synth --out data.h5 --count 64 --image-size 32 --text-len 36 --frames 1 >/dev/null
cp "$repo/apps/configs/tiny.json" cfg.json
sha256sum data.h5 cfg.json >sums.txt
[ "$part" = read-only-folders ] && { chmod 755 "$work"; read_only_folders; exit 0; }
[ "$part" = all ] || { echo "usage: $0 JOULE REPO_DIR WORK_DIR SMALL_MODEL_CONFIG [all|read-only-folders]" >&2; exit 2; }
mkdir adir

# --- 1. command-line values -------------------------------------------------------------------
refused '^joule: error: --steps -1: train\.steps .*\[1, 1073741824\]' train --data data.h5 --steps -1
refused '^joule: error: --seed -5: train\.seed .*0' train --data data.h5 --seed -5
refused '^joule: error: --offload-ratio -0\.5: train\.offload_ratio .*\[0, 1\]' train --data data.h5 --offload-ratio -0.5
refused '^joule: error: --recompute-depth -1: train\.recompute_depth .*\[0, 2\]' train --data data.h5 --recompute-depth -1
refused '^joule: error: --recompute-depth 3: train\.recompute_depth .*\[0, 2\]' train --data data.h5 --recompute-depth 3
refused '^joule: error: --micro-batch -1: train\.micro_batch ' train --data data.h5 --micro-batch -1
refused '^joule: error: --micro-batch 5: train\.micro_batch .*divide.*64' train --data data.h5 --micro-batch 5
refused '^joule: error: --host-threads -1: train\.host_threads .*\[0, 4096\]' train --data data.h5 --host-threads -1
refused '^joule: error: --seq-shards -1: train\.seq_shards .*\[1, 4096\]' train --data data.h5 --seq-shards -1
refused '^joule: error: --checkpoint-every -1: train\.checkpoint_every ' train --data data.h5 --checkpoint-every -1
refused '^--steps: 99999999999999999999 is too large for a 64-bit integer$' train --data data.h5 --steps 99999999999999999999
refused '^--steps: 2\.5 is not a whole number$' train --data data.h5 --steps 2.5
# The running trainer's flags come from their table (core/config/reconfigurable.hpp): numbers read whole.
refused '^--offload-ratio: 1e999 is beyond the range of any double$' train --data data.h5 --offload-ratio 1e999
refused '^--offload-ratio: abc is not a number$' train --data data.h5 --offload-ratio abc
refused '^--offload-cast: gpu not in \{device,host\}' train --data data.h5 --offload-cast gpu
# The flag is blamed, not the file it overrides.
refused '^joule: error: --steps 0: train\.steps ' train --config cfg.json --data data.h5 --steps 0
grep -q "cfg.json:" out.txt && fail "an error of --steps blames cfg.json: $(cat out.txt)"
refused '^joule: error: --steps -1: train\.steps ' tune --data data.h5 --steps -1
refused '^joule: error: --measured-steps -1: tune\.measured_steps .*\[2, 10000\]' tune --data data.h5 --measured-steps -1
refused '^joule: error: --warmup-steps -1: tune\.warmup_steps .*\[0, 1000\]' tune --data data.h5 --warmup-steps -1
refused '^joule: error: --max-repeats -1: tune\.max_repeats .*\[1, 100\]' tune --data data.h5 --max-repeats -1
refused '^joule: error: --budget-mib -1: tune\.device_memory_budget_mib ' tune --data data.h5 --budget-mib -1
# CLI11's range message: "not in range 0 to 9" (CLI11 2.3), "not in range [0 - 9]" (2.4 on).
refused '^--seed: Value -5 not in range (0 to |\[0 - )' data synth --out s.h5 --seed -5
refused '^--count: Value -1 not in range (1 to |\[1 - )' data synth --out s.h5 --count -1
refused '^--frames: Value -1 not in range (1 to 256|\[1 - 256\])' data synth --out s.h5 --frames -1
refused 'excludes --frames|--frames excludes' data synth --config cfg.json --out s.h5 --frames 2
[ ! -e s.h5 ] || fail "a refused data synth wrote s.h5"
unchanged "flags"

# --- 2. unknown subcommands -------------------------------------------------------------------
refused "^joule: unknown subcommand 'frobnicate'; the subcommands are: bench, info, train, data, energy, tune, inspect, caption$" frobnicate
refused "^joule: a subcommand is required; the subcommands are: bench, info, train" 
refused "^joule data: unknown subcommand 'frob'; the subcommands are: synth, info$" data frob
refused "^joule energy: unknown subcommand 'frob'; the subcommands are: probe$" energy frob
refused "^joule data: a subcommand is required; the subcommands are: synth, info$" data

# --- 3. outputs never overwrite inputs --------------------------------------------------------
ln -s data.h5 link.h5
ln data.h5 hard.h5
refused '^joule: error: --checkpoint data\.h5 and --data data\.h5 are the same file' train --data data.h5 --checkpoint data.h5 --steps 1
refused '^joule: error: --checkpoint link\.h5 and --data data\.h5 are the same file' train --data data.h5 --checkpoint link.h5 --steps 1
refused '^joule: error: --checkpoint hard\.h5 and --data data\.h5 are the same file' train --data data.h5 --checkpoint hard.h5 --steps 1
refused '^joule: error: --checkpoint cfg\.json and --config cfg\.json are the same file' train --config cfg.json --data data.h5 --checkpoint cfg.json
# The checkpoint named by the configuration (field and file named).
"$py" - <<'PY'
import json
c = json.load(open("cfg.json"))
c["train"]["checkpoint"] = "link.h5"
c["data"]["path"] = "data.h5"
json.dump(c, open("cfg-ckpt-data.json", "w"))
c["train"]["checkpoint"] = "missing-folder/ckpt.h5"
c["train"]["checkpoint_every"] = 0
json.dump(c, open("cfg-ckpt-missing.json", "w"))
c["train"]["checkpoint"] = ""
c["data"]["path"] = "cfg-self.json"
json.dump(c, open("cfg-self.json", "w"))
PY
refused '^joule: error: train\.checkpoint \(from cfg-ckpt-data\.json\) link\.h5 and data\.path \(from cfg-ckpt-data\.json\) data\.h5 are the same file' \
  train --config cfg-ckpt-data.json --steps 1
refused '^joule: error: --out data\.h5 and --data data\.h5 are the same file' tune --data data.h5 --out data.h5
refused '^joule: error: --resume link\.h5 and --data data\.h5 are the same file' tune --data data.h5 --resume link.h5
refused '^joule: error: train\.checkpoint \(from cfg-ckpt-data\.json\) link\.h5 and data\.path .* are the same file' \
  tune --config cfg-ckpt-data.json --out run-x.h5
[ ! -e run-x.h5 ] || fail "a refused tune wrote its log"
refused '^joule: error: --out cfg\.json and --config cfg\.json are the same file' data synth --config cfg.json --out cfg.json
refused '^joule: error: data\.path \(from cfg-self\.json\) cfg-self\.json and --config cfg-self\.json are the same file' \
  data synth --config cfg-self.json
unchanged "outputs and inputs"
# Resuming the checkpoint the run goes on writing is allowed (read whole before the first write).
"$joule" train --config "$small_config" --data data.h5 --steps 1 --no-energy --checkpoint ckpt.h5 >train1.txt 2>&1 ||
  fail "train: $(cat train1.txt)"
"$joule" train --config "$small_config" --data data.h5 --steps 2 --no-energy --resume ckpt.h5 --checkpoint ckpt.h5 \
  >train2.txt 2>&1 ||
  fail "resume into the same checkpoint: $(cat train2.txt)"
grep -q "== summary ==" train2.txt || fail "the resumed run did not finish: $(cat train2.txt)"
grep -qE "^memory: [0-9.]+ (KiB|MiB) per process predicted \(parameters .*\); [0-9.]+ (MiB|GiB|TiB) free \(" train2.txt ||
  fail "no memory line at the start of a run: $(cat train2.txt)"
echo "ok: --resume ckpt.h5 --checkpoint ckpt.h5 continues"

# --- 4. outputs' folders, before any work -------------------------------------------------------
refused '^joule: error: --checkpoint missing/ckpt\.h5: the folder missing does not exist' train --data data.h5 --steps 1 --checkpoint missing/ckpt.h5
refused '^joule: error: train\.checkpoint \(from cfg-ckpt-missing\.json\) missing-folder/ckpt\.h5: the folder missing-folder does not exist' \
  train --config cfg-ckpt-missing.json --steps 1
refused '^joule: error: --checkpoint adir: is a folder' train --data data.h5 --steps 1 --checkpoint adir
refused '^joule: error: --checkpoint data\.h5/ckpt\.h5: data\.h5 is not a folder' train --data data.h5 --steps 1 --checkpoint data.h5/ckpt.h5
refused '^joule: error: --out adir: is a folder' tune --data data.h5 --out adir
refused '^joule: error: --out adir: is a folder' data synth --out adir --count 8
[ -z "$(find . -name '.joule-write-probe-*')" ] || fail "probe files left behind: $(find . -name '.joule-write-probe-*')"

# --- 5. a run log, its report when inconsistent, and its plots -----------------------------------
"$py" - "$small_config" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["data"]["path"] = "data.h5"
c["train"]["eval_samples"] = 4
c["tune"] = {"offload_ratios": [0, 1], "recompute_depths": [0], "strategy": "exhaustive", "train_after": False,
             "warmup_steps": 0, "measured_steps": 2, "max_repeats": 1}
json.dump(c, open("cfg-tune.json", "w"))
PY
"$joule" tune --config cfg-tune.json --out run.h5 >tune.txt 2>&1 || fail "tune: $(cat tune.txt)"
refused '^joule: error: run\.h5 exists: continue it with --resume' tune --config cfg-tune.json --out run.h5
# (Captured first: under pipefail, grep -q leaving early can end joule's write in SIGPIPE.)
report=$("$joule" inspect run.h5) && grep -q "Chosen configuration: trial" <<<"$report" || fail "no chosen trial in run.h5"
# Flags inspect would ignore (issue 51): --objective ranks a replay's measurements only, and a
# replay has no CSV form; each is an error naming both flags, not a report that silently ignores one.
refused '^--objective requires --replay' inspect run.h5 --objective energy_under_slowdown
refused '^(--csv excludes --replay|--replay excludes --csv)' inspect run.h5 --csv --replay exhaustive
# A run log where a checkpoint is expected says what to do with it.
refused '^joule: error: --resume run\.h5 is a tuning run log, not a checkpoint: joule train --resume takes a checkpoint.*joule tune --resume run\.h5' \
  train --data data.h5 --resume run.h5
refused '^joule: error: --resume run\.h5 is a tuning run log, not a checkpoint: joule train --tune --resume takes the checkpoint' \
  train --tune --data data.h5 --resume run.h5
# A report that cannot be written whole (a full disk behind standard output) is an error, not exit 0.
rc=0; "$joule" inspect run.h5 >/dev/full 2>err.txt || rc=$?
[ $rc = 1 ] && grep -q "^joule: error: cannot write to standard output (No space left on device)" err.txt ||
  fail "inspect > /dev/full: exit $rc: $(cat err.txt)"
# A FIFO given as a dataset: refused at once, not after the read guard's minute as "damaged or forged".
mkfifo pipe.h5
refused '^joule: error: pipe\.h5: is a FIFO \(named pipe\), not a regular file' train --data pipe.h5 --steps 1 --no-energy
rm -f pipe.h5
# The chosen trial's time becomes NaN, the other ok trial's energy infinite.
read -r best other < <("$py" - <<'PY'
import h5py, math
with h5py.File("run.h5", "r+") as f:
    best = int(f["best"].attrs["trial"])
    other = [int(k) for k in f["trials"] if int(k) != best][0]
    f["trials"][f"{best:04d}"].attrs["time_per_step_s"] = math.nan
    f["trials"][f"{other:04d}"].attrs["energy_per_step_j"] = math.inf
    print(best, other)
PY
)
"$joule" inspect run.h5 >report.txt 2>&1 || fail "inspect of the edited log: $(cat report.txt)"
grep -q "WARNING: inconsistent log: the chosen trial $best has no finite time and energy per step" report.txt ||
  fail "no warning naming the chosen trial $best: $(cat report.txt)"
grep -q "WARNING: inconsistent log: ok trial $other has no finite time and energy per step" report.txt ||
  fail "no warning naming trial $other: $(cat report.txt)"
grep -qiE "nan%|inf%" report.txt && fail "the report prints a non-finite percentage: $(cat report.txt)"
echo "ok: inspect warns about trials $best and $other"

# plot_run.py: no plot over the log, through a symlink or by name; a folder as a plot path.
sha256sum run.h5 >sums.txt
plot_refused() {
  local pattern="$1" rc=0
  shift
  "$py" "$repo/apps/scripts/plot_run.py" "$@" >plot.txt 2>&1 || rc=$?
  [ $rc = 2 ] && grep -qE -- "$pattern" plot.txt || fail "plot_run.py $*: exit $rc, $(cat plot.txt)"
  grep -q "\.png$" plot.txt && fail "plot_run.py $*: plots written: $(cat plot.txt)"
  echo "refused: plot_run.py $* -> $(head -1 plot.txt)"
}
mkdir plots1 plots2 plots3
ln -s ../run.h5 plots1/pareto.png
plot_refused '^plot_run\.py: --out plots1: plots1/pareto\.png and the run log run\.h5 are the same file' run.h5 --out plots1
cp run.h5 plots2/loss.png
plot_refused '^plot_run\.py: --out plots2: plots2/loss\.png and the run log plots2/loss\.png are the same file' plots2/loss.png --out plots2
mkdir plots3/regions.png
plot_refused '^plot_run\.py: --out plots3: plots3/regions\.png is a folder' run.h5 --out plots3
unchanged "plots"

# --- 6. memory, before anything is allocated ---------------------------------------------------
# 8192 wide and 64 deep: about 800 GiB by the memory model, more than any machine this runs on.
# A run that fits prints its own prediction (checked after the resume above).
"$py" - <<'PY'
import json
c = json.load(open("cfg.json"))
c["model"].update(d_model=8192, heads=64, layers=64)
json.dump(c, open("cfg-huge.json", "w"))
PY
refused "^joule: error: the model does not fit in (this machine's|the GPU's) memory: the memory model predicts [0-9.]+ GiB per process \(parameters [0-9.]+ GiB, gradients .*optimizer state [0-9.]+ GiB\) with train\.micro_batch 32, train\.recompute_depth 0, train\.offload_ratio 0, but [0-9.]+ [KMGT]iB (is|are) free \(.*\); even train\.micro_batch 1, train\.recompute_depth 64, .* \(--no-memory-check trains anyway\)$" \
  train --config cfg-huge.json --data data.h5
unchanged "memory"

# --- 7. help, and joule caption's checks ------------------------------------------------------
for cmd in "" train caption "data synth"; do
  # shellcheck disable=SC2086
  "$joule" $cmd --help >help.txt 2>&1 || fail "joule $cmd --help failed: $(cat help.txt)"
  # The usage line first: "Usage: joule [OPTIONS] ..." (CLI11 2.3), "joule [OPTIONS] ..." after an
  # empty line (2.5).
  grep -m1 . help.txt | grep -qE "^(Usage: )?joule ${cmd:+$cmd }\[OPTIONS\]" ||
    fail "joule $cmd --help starts with: $(grep -m1 . help.txt)"
  if grep -qi "kokkos command line arguments\|--kokkos-threads" help.txt; then fail "joule $cmd --help lists Kokkos' options"; fi
  grep -q -- "joule --kokkos-help" help.txt || fail "joule $cmd --help does not point to --kokkos-help"
done
"$joule" --kokkos-help >help.txt 2>&1 || fail "joule --kokkos-help failed"
grep -q -- "--kokkos-threads\|--kokkos-num-threads" help.txt || fail "joule --kokkos-help lists no Kokkos option: $(head -5 help.txt)"
echo "help: joule's own, usage first; Kokkos' options under --kokkos-help"
refused "^joule: error: joule caption: give --data FILE.h5 or --images FOLDER$" caption --checkpoint data.h5
refused "^--held-out requires --data$" caption --checkpoint data.h5 --images adir --held-out
refused "^joule: error: --out data.h5 and --data data.h5 are the same file" caption --checkpoint cfg.json --data data.h5 --out data.h5
refused "^joule: error: --out run.txt: name a .csv or .h5 file" caption --checkpoint data.h5 --data data.h5 --out run.txt
refused "^joule: error: data.h5: not a joule checkpoint" caption --checkpoint data.h5 --data data.h5
unchanged "caption"
echo "PASS"
