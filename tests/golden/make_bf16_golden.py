#!/usr/bin/python3
"""Writes tests/golden/bf16_golden.h5: float32 values and what torch.bfloat16 makes of them. The C++
test (tests/test_bf16.cpp) checks joule's conversion (core/precision/bf16.hpp) against it bit for
bit, NaNs aside: PyTorch's own paths disagree on NaN bits (its scalar c10::BFloat16 gives 0x7FC0,
its vectorised CPU conversion 0xFFFF), so for a NaN input the test asks for a NaN only.

Run with Debian's python3 (python3-torch, python3-h5py):  /usr/bin/python3 tests/golden/make_bf16_golden.py
"""
import os

import h5py
import numpy as np
import torch

rng = np.random.default_rng(20261202)


def edges():
    v = [0x00000000, 0x80000000,              # +-0
         0x7F800000, 0xFF800000,              # +-inf
         0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FFFFFFF,  # quiet, signalling, payload NaNs
         0x7F7FFFFF, 0xFF7FFFFF,              # largest float: past bf16's largest + half an ulp -> inf
         0x7F7F7FFF, 0x7F7F8000, 0x7F7F0000,  # just below, at and under the overflow tie
         0x7F7E8000, 0x7F7E8001,              # a tie that stays (even) and one just above it
         0x00000001, 0x80000001, 0x007FFFFF,  # smallest and largest subnormal floats
         0x00008000, 0x00018000, 0x00010000, 0x00007FFF, 0x00008001,  # subnormal ties and neighbours
         0x00800000, 0x007F8000, 0x007FFFFF,  # smallest normal; the subnormal tie that carries into it
         0x3F800000, 0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001,  # ties to even around 1
         0xBF808000, 0xBF818000]
    # every tie and its neighbours for a spread of exponents
    for e in range(0, 255, 7):
        for m in (0x0000, 0x0001, 0x007F):
            base = (e << 23) | (m << 16)
            v += [base | 0x8000, base | 0x7FFF, base | 0x8001, (base | 0x8000) | 0x80000000]
    return v


bits = np.array(edges(), dtype=np.uint32)
uniform = rng.integers(0, 2**32, size=8192, dtype=np.uint64).astype(np.uint32)  # every class of value
normal = (rng.standard_normal(4096) * 10.0 ** rng.integers(-30, 30, size=4096)).astype(np.float32).view(np.uint32)
bits = np.concatenate([bits, uniform, normal])
x = torch.from_numpy(bits.view(np.float32).copy())
bf = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bf16_golden.h5")
with h5py.File(out + ".tmp", "w") as f:
    f.create_dataset("float_bits", data=bits.astype(np.int64))
    f.create_dataset("bf16_bits", data=bf.astype(np.int32))
    f.attrs["torch_version"] = np.bytes_(str(torch.__version__))
    f.attrs["what"] = np.bytes_("float_bits: float32 bit patterns; bf16_bits: torch.tensor(float32).to(torch.bfloat16)")
os.replace(out + ".tmp", out)
print(f"wrote {out}: {len(bits)} values, torch {torch.__version__}")
