#!/usr/bin/env bash
# The Slurm templates (apps/slurm/*.sbatch) run joule's main job: each template is run whole with
# bash (its #SBATCH lines are comments) on the CPU build, its `srun ... joule train --tune ...` line
# going through a stand-in `srun` first on PATH that sets SLURM_* as Slurm would for one node and
# executes the command (one task, or under MPIEXEC with several, each given its SLURM_LOCALID and
# SLURM_PROCID). A tiny configuration and a tiny search (JOB_CONFIG, JOB_STEPS: the templates read
# them from the environment). For every template:
#   1. the job ends with status 0 and writes its run log and checkpoint in JOB_OUT, nothing in the checkout;
#   2. the job prints the `joule inspect` and plot commands for that log;
#   3. `joule inspect LOG` reads the log (exit 0) and names its trials, and the log's /@gpu names
#      each rank's GPU ("no GPU (OpenMP build)" here);
#   4. the thread split it chose is one joule accepts (SLURM_CPUS_PER_TASK=2: 1 CPU for the
#      optimizer, 1 for Kokkos; it was JOULE_HOST_CORES=-2, which joule refused).
# Then one-gh200.sbatch is stopped by SIGTERM (Slurm's --signal) once a trial is in its log: exit
# 143, the checkpoint, and the line saying to submit again; submitted again, it says it resumes,
# joule keeps the log's finished trials, the checkpoint reaches the full step count and the log's
# /@resumed records the resumption. Before all this, an output folder inside the checkout is refused.
# The multi-rank templates run with 2 ranks under MPIEXEC where it is given (1 CPU each on a machine
# with fewer than 4), else with 1 task; the script says which.
# usage: slurm_templates_run.sh JOULE_BINARY REPO_DIR WORK_DIR [MPIEXEC NUMPROC_FLAG [PREFLAGS...]]
# (the launcher as CMake's FindMPI names it; OpenMPI's settings for oversubscription and root come
# from the environment, as for the mpirun tests)
set -euo pipefail
joule="$(realpath "$1")" repo="$(realpath "$2")" work="$(realpath -m "$3")"
shift 3
mpiexec=("$@")
rm -rf "$work" && mkdir -p "$work/bin"
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3

ln -s "$joule" "$work/bin/joule"
# The stand-in srun: its own options (all of the form --name=value, as the templates write them, or
# a flag below), then the command. Slurm's step variables for one node of STANDIN_TASKS tasks.
cat >"$work/bin/srun" <<'SRUN'
#!/usr/bin/env bash
set -euo pipefail
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in
    --*=*) shift ;;
    --exclusive|--overlap) shift ;;
    *) echo "stand-in srun: option $1 is not of the form --name=value" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "stand-in srun: no command" >&2; exit 2; }
echo "$*" >>"$STANDIN_COMMANDS"
tasks=${STANDIN_TASKS:-1}
export SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=$tasks SLURM_NTASKS=$tasks SLURM_NTASKS_PER_NODE=$tasks \
       SLURM_STEP_NUM_NODES=1 SLURM_NNODES=1 SLURM_NODEID=0 SLURM_STEPID=0
if [[ $tasks == 1 ]]; then
  export SLURM_LOCALID=0 SLURM_PROCID=0
  echo $$ >"$STANDIN_PIDS"  # the task's pid (exec keeps it): Slurm's --signal goes to the task
  exec "$@"
fi
# Several: under the MPI launcher, each rank told its Slurm ids (as srun --mpi=pmix would start them).
# The launcher itself runs without SLURM_*: seeing them, Open MPI 5's (PRRTE's) asks Slurm for the
# allocation (SLURM_NODELIST, srun) and stops. The ranks get them back from STANDIN_SLURM.
launcher=(@LAUNCHER@)
export STANDIN_SLURM="$(declare -px ${!SLURM_@})"
unset_slurm=()
for v in ${!SLURM_@}; do unset_slurm+=(-u "$v"); done
exec env "${unset_slurm[@]}" "${launcher[0]}" "${launcher[1]}" "$tasks" "${launcher[@]:2}" bash -c \
  'eval "$STANDIN_SLURM"; unset STANDIN_SLURM
   export SLURM_LOCALID=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${PMI_LOCAL_RANK:?no local rank from the MPI launcher}}}
   export SLURM_PROCID=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:?no rank from the MPI launcher}}; exec "$@"' standin "$@"
SRUN
launcher_text=$(printf '%q ' "${mpiexec[@]}")
sed -i "s|@LAUNCHER@|${launcher_text//|/\\|}|" "$work/bin/srun"
chmod +x "$work/bin/srun"

# A small model and a small search: 2 offload ratios x 2 recompute depths, short trials.
config="$work/tiny-job.json"
"$py" - "$repo/apps/configs/tiny.json" "$config" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["model"].update(layers=2, d_model=32, heads=2, mlp_ratio=2, image_size=16, text_len=34)
cfg["data"]["path"] = "unused-the-template-gives-data.h5"
cfg["train"].update(batch=8, micro_batch=4, steps=600, warmup_steps=2, eval_every=0, eval_samples=8, log_every=5)
cfg["tune"] = {"offload_ratios": [0, 1], "recompute_depths": [0, 1], "warmup_steps": 0, "measured_steps": 2,
               "max_repeats": 1, "confirm_rounds": 0, "reference_every": 0}
json.dump(cfg, open(sys.argv[2], "w"), indent=1)
PY

# run_template NAME STEPS TASKS [background]: the template run as sbatch would (the job named by its
# --job-name), submitted from a checkout ($work/checkout: the repository's apps/, since this work
# folder is itself inside the repository, where the templates refuse to write), with SCRATCH set and
# JOB_OUT and JOB_DATA left to their defaults ($SCRATCH/joule-runs/JOB_NAME, $SCRATCH/joule-runs/data);
# its output in $work/NAME.N.out.
scratch="$work/scratch" checkout="$work/checkout"
mkdir -p "$checkout" && ln -s "$repo/apps" "$checkout/apps"
job_name() { sed -n 's/^#SBATCH --job-name=\([^ ]*\).*/\1/p' "$repo/apps/slurm/$1"; }
runs=0
run_template() {
  local name=$1 steps=$2 tasks=$3 background=${4:-} cpus=2
  runs=$((runs + 1)) run_rc=0 run_output="$work/$name.$runs.out"
  # Several ranks on fewer than 2 CPUs each: Slurm would not place them; 1 CPU per task then.
  ((tasks == 1 || $(nproc) >= 2 * tasks)) || cpus=1
  rm -f "$work/task.pid"
  (
    cd "$checkout"
    env PATH="$work/bin:$PATH" STANDIN_COMMANDS="$work/$name.commands" STANDIN_TASKS="$tasks" STANDIN_PIDS="$work/task.pid" \
      SLURM_JOB_ID=$((4200 + runs)) SLURM_JOB_NAME="$(job_name "$name")" SCRATCH="$scratch" SLURM_SUBMIT_DIR="$checkout" SLURM_JOB_NUM_NODES=1 \
      SLURM_NNODES=1 SLURM_CPUS_PER_TASK=$cpus SLURM_NTASKS=$tasks SLURM_NTASKS_PER_NODE=$tasks SLURM_JOB_NODELIST=standin1 \
      JOB_CONFIG="$config" JOB_STEPS="$steps" \
      JOB_SEQ_SHARDS=$tasks JOB_MICRO_BATCH=4 OMPI_MCA_rmaps_base_oversubscribe=1 \
      bash "$checkout/apps/slurm/$name"
  ) >"$run_output" 2>&1 &
  run_pid=$!
  [[ -n $background ]] || { wait $run_pid || run_rc=$?; }
}

step_of() { "$py" -c 'import h5py, sys; print(int(h5py.File(sys.argv[1], "r").attrs["step"]))' "$1"; }

# An output folder inside the checkout is refused before anything runs.
JOB_OUT="$checkout/runs" run_template one-gh200.sbatch 20 1
[[ $run_rc == 1 ]] || fail "JOB_OUT inside the checkout: status $run_rc, not 1: $(tail -5 "$run_output")"
grep -q "is inside the checkout $checkout: give the job's outputs a folder of their own" "$run_output" ||
  fail "JOB_OUT inside the checkout: no clear message: $(cat "$run_output")"
[[ ! -e $checkout/runs && ! -e $work/one-gh200.sbatch.commands ]] || fail "JOB_OUT inside the checkout: the job made it or ran"
for t in "$repo"/apps/slurm/${STANDIN_ONLY:-*}.sbatch; do
  name=$(basename "$t")
  tasks=1
  if grep -q -- '--ntasks-per-node=4' "$t"; then
    if ((${#mpiexec[@]} >= 2)); then tasks=2; else echo "$name: no MPI launcher given: 1 task"; fi
  fi
  out="$scratch/joule-runs/$(job_name "$name")"
  [[ $out != "$scratch/joule-runs/" ]] || fail "$name: no #SBATCH --job-name"
  run_template "$name" 20 "$tasks"
  rc=$run_rc log="$out/run-log.h5" ckpt="$out/checkpoint.h5" output=$run_output
  [[ $rc == 0 ]] || fail "$name: the job ended with status $rc: $(tail -20 "$output")"
  # The thread split joule accepts: 2 CPUs give 1 to the optimizer and 1 to Kokkos (was -2: refused).
  if ((tasks == 1)) && (($(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) >= 2)); then
    grep -q "^threads per task: 2 CPUs; JOULE_HOST_CORES=1 (the offloaded AdamW), OMP_NUM_THREADS=1 (Kokkos)" "$output" ||
      fail "$name: not the thread split of 2 CPUs: $(grep '^threads' "$output")"
  fi
  grep -q "joule train --tune" "$work/$name.commands" || fail "$name: srun did not run joule train --tune: $(cat "$work/$name.commands")"
  [[ -f $log ]] || fail "$name: no run log $log: $(tail -20 "$output")"
  [[ -f $ckpt ]] || fail "$name: no checkpoint $ckpt"
  grep -qF "joule inspect $log" "$output" || fail "$name: the job does not print 'joule inspect $log': $(tail -5 "$output")"
  grep -qF "apps/scripts/plot_run.py $log" "$output" || fail "$name: the job does not print the plot command for $log"
  inspect=$("$joule" inspect "$log" 2>&1) || fail "$name: joule inspect $log failed: $inspect"
  grep -qE "^ +0\*? " <<<"$inspect" || fail "$name: joule inspect names no trial 0: $inspect"
  # The GPU each rank took: /@gpu, one line per rank under MPI (on this CPU build, "no GPU").
  "$py" - "$log" "$tasks" <<'PY' || fail "$name: the run log's /@gpu does not name every rank's GPU"
import h5py, sys
gpu = h5py.File(sys.argv[1], "r").attrs["gpu"]
gpu = gpu.decode() if isinstance(gpu, bytes) else gpu
tasks = int(sys.argv[2])
lines = gpu.split("\n")
want = ["no GPU (OpenMP build)"] if tasks == 1 else [f"rank {r}: no GPU (OpenMP build)" for r in range(tasks)]
assert lines == want, (lines, want)
PY
  grep -q "^  GPU: " <<<"$inspect" || fail "$name: joule inspect prints no GPU line"
  trials=$("$joule" inspect --csv "$log" | tail -n +2 | wc -l)
  ((trials >= 2)) || fail "$name: the log holds $trials trials"
  echo "$name: $tasks task(s): status 0, run log with $trials trials read by joule inspect, checkpoint at step $(step_of "$ckpt")"
done

# one-gh200.sbatch stopped by Slurm's --signal=TERM before its time limit (sent to the task once
# a trial is in the log), then submitted again: the training and the log go on to the end.
name=one-gh200.sbatch out="$scratch/joule-runs/$(job_name one-gh200.sbatch)-resumed"
steps=1000
export JOB_OUT="$out"  # this job's own folder (the one above finished its run)
run_template "$name" "$steps" 1 background
output=$run_output
for _ in $(seq 1 6000); do
  grep -qE "^  trial +[1-9] " "$output" 2>/dev/null && [[ -s $work/task.pid ]] && break
  kill -0 $run_pid 2>/dev/null || fail "the job ended before it could be stopped: $(tail -20 "$output")"
  sleep 0.02
done
kill -TERM "$(cat "$work/task.pid")"
rc=0 && wait $run_pid || rc=$?
[[ $rc == 143 ]] || fail "stopped by SIGTERM, the job ended with status $rc, not 143: $(tail -20 "$output")"
grep -q "stopped before the time limit; checkpoint $out/checkpoint.h5: sbatch this script again to go on" "$output" ||
  fail "the stopped job does not say how to go on: $(tail -5 "$output")"
grep -qF "joule inspect $out/run-log.h5" "$output" || fail "the stopped job does not print the inspect command"
stopped_at=$(step_of "$out/checkpoint.h5")
((stopped_at < steps)) || fail "the job was stopped at step $stopped_at, its end: nothing to resume"
trials_before=$("$joule" inspect --csv "$out/run-log.h5" | tail -n +2 | grep -c ',ok,' || true)
((trials_before >= 1)) || fail "the stopped job's log holds no finished trial: $("$joule" inspect --csv "$out/run-log.h5")"
echo "one-gh200.sbatch stopped by SIGTERM at step $stopped_at (status 143) with $trials_before finished trial(s)"

run_template "$name" "$steps" 1
rc=$run_rc output=$run_output
[[ $rc == 0 ]] || fail "resubmitted $name: status $rc: $(tail -20 "$output")"
grep -q "^resuming: the training from $out/checkpoint.h5, the run log $out/run-log.h5 continued" "$output" ||
  fail "resubmitted $name does not say it resumes: $(head -5 "$output")"
grep -q -- "--resume $out/checkpoint.h5" "$work/$name.commands" || fail "resubmitted $name did not pass --resume"
grep -q "resumed: $trials_before finished trials kept" "$output" || fail "the resumed job did not keep the log's trials: $(grep -i resum "$output")"
step=$(step_of "$out/checkpoint.h5")
[[ $step == "$steps" ]] || fail "after the resubmission the checkpoint is at step $step, not $steps"
"$py" - "$out/run-log.h5" <<'PY' || fail "the resumed run log does not record the resumption"
import h5py, sys
f = h5py.File(sys.argv[1], "r")
resumed = f.attrs["resumed"]
resumed = resumed.decode() if isinstance(resumed, bytes) else resumed
assert resumed.strip(), "the log's /@resumed is empty"
print("the log's /@resumed:", resumed.replace("\n", " | "))
PY
"$joule" inspect "$out/run-log.h5" >/dev/null || fail "joule inspect cannot read the resumed log"
echo "resubmitted one-gh200.sbatch: resumed from step $stopped_at to $steps, the log's $trials_before finished trial(s) kept"
unset JOB_OUT

left=$(cd "$checkout" && find . -mindepth 1 -maxdepth 1 ! -name apps)
[[ -z $left ]] || fail "the jobs wrote into the checkout they were submitted from: $left"
echo "PASS: every Slurm template ran joule's tuned job through the stand-in srun"
