#!/usr/bin/env bash
# `joule energy probe` and a short `joule train` on a fake Grace Hopper node: hwmon meters in a
# temporary tree and the fake NVML library. The probe must find both and choose the module total;
# the training run's energy report must be labelled measured, not model. Then probes where
# sources are missing, empty or unreadable: each must say what it looked for and why it is unusable.
# The part `unreadable-rapl` (its own ctest entry) runs the probe as a user who cannot read RAPL's
# root-only counter: as user nobody when run as root; skipped (exit 77, ctest's SKIP_RETURN_CODE)
# only where root cannot run joule as another user.
# Usage: energy_probe_fake_sensors.sh JOULE FAKE_NVML SMALL_CONFIG [all|unreadable-rapl]
set -euo pipefail
joule="$1"; fake_nvml="$2"; small_config="$3"  # a small model: only the report's labels are checked
part="${4:-all}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
expect() {  # expect TEXT PROBE_OUTPUT
  grep -qF -- "$1" <<<"$2" || { echo "FAIL: the probe does not say: $1"; echo "$2"; exit 1; }
}
# RAPL behind a root-only file (mode 000, as since CVE-2020-8694).
locked_powercap() {
  mkdir -p "$work/locked-powercap/intel-rapl:0"
  echo package-0 > "$work/locked-powercap/intel-rapl:0/name"
  echo 123 > "$work/locked-powercap/intel-rapl:0/energy_uj"
  chmod 000 "$work/locked-powercap/intel-rapl:0/energy_uj"
}
if [ "$part" = unreadable-rapl ]; then
  locked_powercap
  as_user=()
  if [ "$(id -u)" = 0 ]; then
    chmod 755 "$work"
    as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
    "${as_user[@]}" "$joule" --version >/dev/null 2>&1 || {
      echo "SKIP: running as root, and joule cannot run as user nobody here (setpriv): the refusal to read a root-only RAPL file is not checked"
      exit 77
    }
  fi
  probe="$(JOULE_NVML_LIBRARY=none JOULE_HWMON_ROOT="$work/no-hwmon" JOULE_POWERCAP_ROOT="$work/locked-powercap" \
           "${as_user[@]}" "$joule" energy probe)"
  echo "$probe"
  expect "  rapl: $work/locked-powercap/{intel,amd}-rapl:* — permission denied reading $work/locked-powercap/intel-rapl:0/energy_uj (root-only since CVE-2020-8694" "$probe"
  echo "PASS: RAPL's root-only counter is named as unreadable${as_user:+ (run as user nobody)}"
  exit 0
fi
[ "$part" = all ] || { echo "usage: $0 JOULE FAKE_NVML SMALL_CONFIG [all|unreadable-rapl]" >&2; exit 2; }
mkdir -p "$work/hwmon/hwmon3/device" "$work/hwmon/hwmon4" "$work/powercap"
echo "Module Power Socket 0" > "$work/hwmon/hwmon3/device/power1_oem_info"
echo 500000000 > "$work/hwmon/hwmon3/device/power1_average"
echo "CPU Power Socket 0" > "$work/hwmon/hwmon4/power1_oem_info"
echo 80000000 > "$work/hwmon/hwmon4/power1_average"
export JOULE_HWMON_ROOT="$work/hwmon" JOULE_POWERCAP_ROOT="$work/powercap" JOULE_NVML_LIBRARY="$fake_nvml"
export FAKE_NVML_C2C=1 FAKE_NVML_MODULE_MW=450000
probe="$("$joule" energy probe)"
echo "$probe"
grep -q "^source nvml" <<<"$probe"
grep -q "^source hwmon" <<<"$probe"
grep -q "module: hwmon Module Power Socket 0" <<<"$probe"
grep -q "total used by the scheduler: module" <<<"$probe"
if grep -q "^source model" <<<"$probe"; then echo "the model must not be used when sensors are there"; exit 1; fi
grep -qF "  nvml: $fake_nvml — found: gpu 0" <<<"$probe"
grep -qF "  hwmon: $work/hwmon — found: Module Power Socket 0 (hwmon3), CPU Power Socket 0 (hwmon4)" <<<"$probe"
grep -qF "  rapl: $work/powercap/{intel,amd}-rapl:* — no RAPL zones" <<<"$probe"
cd "$work"
train="$("$joule" train --config "$small_config" --make-data --steps 2 --data "$work/shapes.h5")"
grep -q "total = module (Grace Hopper module power: GPU + CPU + memory), measured" <<<"$train"
grep -q "module/nvml (measured)" <<<"$train"
grep -q "module/hwmon (measured)" <<<"$train"
if grep -q "(estimate)" <<<"$train"; then echo "a modelled column appeared next to measured ones"; exit 1; fi
echo "energy probe on fake sensors: ok"

# Nothing readable: every source says what it looked for and why it is not used.
mkdir -p "$work/empty-powercap"
probe="$(JOULE_NVML_LIBRARY="$work/missing/libnvidia-ml.so.1" JOULE_HWMON_ROOT="$work/no-hwmon" \
         JOULE_POWERCAP_ROOT="$work/empty-powercap" "$joule" energy probe)"
echo "$probe"
expect "looked for:" "$probe"
expect "  nvml: $work/missing/libnvidia-ml.so.1 — not found (no NVIDIA driver installed?)" "$probe"
expect "  hwmon: $work/no-hwmon — no such folder" "$probe"
expect "  rapl: $work/empty-powercap/{intel,amd}-rapl:* — no RAPL zones" "$probe"
expect "source model" "$probe"

# A library that is not NVML; NVML whose init fails; hwmon without a Grace meter; RAPL behind
# root-only files (which root reads: the part unreadable-rapl checks the refusal as another user).
mkdir -p "$work/plain-hwmon/hwmon0"
echo coretemp > "$work/plain-hwmon/hwmon0/name"
echo 40000 > "$work/plain-hwmon/hwmon0/temp1_input"
locked_powercap
probe="$(JOULE_NVML_LIBRARY=libc.so.6 JOULE_HWMON_ROOT="$work/plain-hwmon" \
         JOULE_POWERCAP_ROOT="$work/locked-powercap" "$joule" energy probe)"
echo "$probe"
expect "  nvml: libc.so.6 — loaded, but symbol nvmlInit_v2 missing" "$probe"
expect "  hwmon: $work/plain-hwmon — no Grace power sensor (looked for power1_oem_info" "$probe"
expect "found: hwmon0 (coretemp))" "$probe"
if [ "$(id -u)" != 0 ]; then
  expect "  rapl: $work/locked-powercap/{intel,amd}-rapl:* — permission denied reading $work/locked-powercap/intel-rapl:0/energy_uj (root-only since CVE-2020-8694" "$probe"
else
  expect "  rapl: $work/locked-powercap/{intel,amd}-rapl:* — found: package-0 (intel-rapl:0)" "$probe"
fi
probe="$(FAKE_NVML_INIT_ERROR=9 "$joule" energy probe)"
expect "  nvml: $fake_nvml — nvmlInit_v2 failed: Driver Not Loaded" "$probe"

# NVML is there, but CUDA_VISIBLE_DEVICES names no GPU it knows: no GPU is read, and it says why.
probe="$(CUDA_VISIBLE_DEVICES=7 "$joule" energy probe)"
echo "$probe"
expect "  nvml: $fake_nvml — loaded, but no GPU of this process: CUDA_VISIBLE_DEVICES=7: entry '7' names no GPU (NVML sees 1)" "$probe"
if grep -q "^source nvml" <<<"$probe"; then echo "FAIL: a GPU was read that this process does not see"; exit 1; fi
# '2,0' on 4 GPUs: local rank 1 reads NVML GPU 0, and no other.
probe="$(FAKE_NVML_DEVICES=4 CUDA_VISIBLE_DEVICES=2,0 JOULE_LOCAL_RANK=1 "$joule" energy probe)"
expect "  nvml: $fake_nvml — found: gpu 0, local rank 1 mod 2 visible device(s): CUDA device 1 = entry '0' of CUDA_VISIBLE_DEVICES=2,0" "$probe"
if grep -q "nvml gpu [123]" <<<"$probe"; then echo "FAIL: another GPU than NVML GPU 0 was read"; exit 1; fi
echo "energy probe says what it looked for: ok"

# A meter that blocks (a FIFO nobody writes, as a hung BMC-backed sensor): the probe ends, naming it.
mkdir -p "$work/stalled-hwmon/hwmon3/device"
echo "Module Power Socket 0" > "$work/stalled-hwmon/hwmon3/device/power1_oem_info"
mkfifo "$work/stalled-hwmon/hwmon3/device/power1_average"
rc=0; probe="$(JOULE_HWMON_ROOT="$work/stalled-hwmon" timeout 60 "$joule" energy probe)" || rc=$?
[ $rc = 0 ] || { echo "FAIL: the probe with a blocking sensor ended with $rc (124: it hung)"; exit 1; }
expect "power1_average did not answer within 2 s (a stalled sensor: no longer read)" "$probe"
echo "energy probe with a blocking sensor: ok"
