#!/usr/bin/python3
"""Writes tests/golden/block_golden.h5: a pre-LN transformer block, forward and backward, and one
AdamW step, computed by PyTorch in float64. The C++ test (tests/test_block_golden.cpp) reads it;
the test suite never needs PyTorch.

Run with Debian's python3 (python3-torch, python3-h5py):  /usr/bin/python3 tests/golden/make_block_golden.py

The block is written out by hand with PyTorch primitives (not nn.TransformerEncoderLayer), so the
reference is readable next to core/model/block.hpp; GELU is the tanh form, LayerNorm eps 1e-5.
"""
import math
import os
import sys

import h5py
import numpy as np
import torch

torch.manual_seed(20261129)
torch.set_default_dtype(torch.float64)

CASES = {
    # name: batch, seq, channels, heads, mlp_hidden, mask kind, prefix length
    "prefix": dict(batch=2, seq=13, channels=32, heads=2, mlp_hidden=80, mask="prefix", prefix=5),
    "causal": dict(batch=1, seq=21, channels=64, heads=2, mlp_hidden=96, mask="causal", prefix=0),
    "none": dict(batch=3, seq=7, channels=48, heads=3, mlp_hidden=64, mask="none", prefix=0),
}
ADAMW = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)

PARAM_SHAPES = lambda c, m: {  # noqa: E731  (names as in core/model/block.hpp)
    "ln1.weight": (c,), "ln1.bias": (c,),
    "attn.qkv.weight": (3 * c, c), "attn.qkv.bias": (3 * c,),
    "attn.proj.weight": (c, c), "attn.proj.bias": (c,),
    "ln2.weight": (c,), "ln2.bias": (c,),
    "mlp.fc.weight": (m, c), "mlp.fc.bias": (m,),
    "mlp.proj.weight": (c, m), "mlp.proj.bias": (c,),
}


def allowed(seq, kind, prefix):
    """allowed[i, j]: query i may attend to key j."""
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    if kind == "none":
        return torch.ones(seq, seq, dtype=torch.bool)
    if kind == "causal":
        return j <= i
    return (j <= i) | (j < prefix)


def block(x, p, cfg):
    b, s, c, h = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"]
    hd = c // h
    ln1 = torch.nn.functional.layer_norm(x, (c,), p["ln1.weight"], p["ln1.bias"], eps=1e-5)
    qkv = ln1 @ p["attn.qkv.weight"].T + p["attn.qkv.bias"]
    q, k, v = qkv.split(c, dim=-1)
    q = q.view(b, s, h, hd).transpose(1, 2)
    k = k.view(b, s, h, hd).transpose(1, 2)
    v = v.view(b, s, h, hd).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
    scores = scores.masked_fill(~allowed(s, cfg["mask"], cfg["prefix"]), float("-inf"))
    att = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, c)
    x2 = x + att @ p["attn.proj.weight"].T + p["attn.proj.bias"]
    ln2 = torch.nn.functional.layer_norm(x2, (c,), p["ln2.weight"], p["ln2.bias"], eps=1e-5)
    fc = torch.nn.functional.gelu(ln2 @ p["mlp.fc.weight"].T + p["mlp.fc.bias"], approximate="tanh")
    return x2 + fc @ p["mlp.proj.weight"].T + p["mlp.proj.bias"]


def make_case(group, cfg):
    c, m = cfg["channels"], cfg["mlp_hidden"]
    params = {}
    for name, shape in PARAM_SHAPES(c, m).items():
        if name.endswith("weight") and len(shape) == 1:  # LayerNorm gains near 1, never exactly
            t = 1.0 + 0.2 * torch.randn(shape)
        else:
            t = torch.randn(shape) / math.sqrt(shape[-1])
        params[name] = t.requires_grad_(True)
    x = torch.randn(cfg["batch"], cfg["seq"], c, requires_grad=True)
    dy = torch.randn(cfg["batch"], cfg["seq"], c)
    y = block(x, params, cfg)
    y.backward(dy)

    for key, value in cfg.items():
        group.attrs[key] = value
    n = cfg["batch"] * cfg["seq"]
    group["x"] = x.detach().reshape(n, c).numpy()
    group["dy"] = dy.reshape(n, c).numpy()
    group["y"] = y.detach().reshape(n, c).numpy()
    group["dx"] = x.grad.reshape(n, c).numpy()
    for name, t in params.items():
        group[f"params/{name}"] = t.detach().numpy()
        group[f"grads/{name}"] = t.grad.numpy()

    # One AdamW step from zero moments, on these gradients.
    opt = torch.optim.AdamW(params.values(), lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]),
                            eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    opt.step()
    for name, t in params.items():
        group[f"adamw_step1/{name}"] = t.detach().numpy()


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "block_golden.h5")
    with h5py.File(out, "w") as f:
        f.attrs["generator"] = "tests/golden/make_block_golden.py"
        f.attrs["torch_version"] = str(torch.__version__)
        for key, value in ADAMW.items():
            f.attrs["adamw_" + key] = value
        for name, cfg in CASES.items():
            make_case(f.create_group(name), cfg)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
