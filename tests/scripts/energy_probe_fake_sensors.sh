#!/usr/bin/env bash
# `joule energy probe` and a short `joule train` on a fake Grace Hopper node: hwmon meters in a
# temporary tree and the fake NVML library. The probe must find both and choose the module total;
# the training run's energy report must be labelled measured, not model.
set -euo pipefail
joule="$1"; fake_nvml="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
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
cd "$work"
train="$("$joule" train --make-data --steps 2 --data "$work/shapes.h5")"
grep -q "total = module (Grace Hopper module power: GPU + CPU + memory), measured" <<<"$train"
grep -q "module/nvml (measured)" <<<"$train"
grep -q "module/hwmon (measured)" <<<"$train"
if grep -q "(estimate)" <<<"$train"; then echo "a modelled column appeared next to measured ones"; exit 1; fi
echo "energy probe on fake sensors: ok"
