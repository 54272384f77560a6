#!/usr/bin/python3
"""Writes tests/golden/model_golden.h5: joule's whole captioning model, forward and backward, on
fixed weights and one batch, computed by PyTorch twice: in float32 and with bfloat16 tensors
(model.to(torch.bfloat16): every parameter, activation and gradient bf16, the cross-entropy in
float32 from the bf16 logits, as joule's). The C++ test (tests/test_model.cpp, "[golden]") loads
the same weights into joule's fp32 and bf16 models and compares; the test suite never needs PyTorch.

Run with Debian's python3 (python3-torch, python3-h5py):  /usr/bin/python3 tests/golden/make_model_golden.py

The model is apps/scripts/bench_torch.py's StepModel (the benchmark's PyTorch twin of
core/model/model.cpp). Sizes are awkward on purpose: C = 48 with 3 heads of 16, an MLP of 144, 4
image tokens and 11 text tokens (S = 15), two blocks, tied embeddings.
"""
import importlib.util
import json
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_torch", os.path.join(HERE, "..", "..", "apps", "scripts", "bench_torch.py"))
bench_torch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_torch)

MODEL = dict(layers=2, d_model=48, heads=3, mlp_ratio=3, image_size=16, patch_size=8, channels=3, frames=1,
             text_len=11, tie_embeddings=True)
BATCH = 3
VOCAB, BOS, EOS = 259, 256, 257
BLOCK_TENSORS = [("ln1.weight", "ln1.weight"), ("ln1.bias", "ln1.bias"), ("attn.qkv.weight", "qkv.weight"),
                 ("attn.qkv.bias", "qkv.bias"), ("attn.proj.weight", "proj.weight"), ("attn.proj.bias", "proj.bias"),
                 ("ln2.weight", "ln2.weight"), ("ln2.bias", "ln2.bias"), ("mlp.fc.weight", "fc.weight"),
                 ("mlp.fc.bias", "fc.bias"), ("mlp.proj.weight", "fc_proj.weight"), ("mlp.proj.bias", "fc_proj.bias")]


def step_model_entry(m):
    n_image = (m["image_size"] // m["patch_size"]) ** 2 * m["frames"]
    return dict(m, image_tokens=n_image, seq=n_image + m["text_len"], vocab=VOCAB, mlp=m["mlp_ratio"] * m["d_model"])


def groups(model):
    """joule's parameter groups (core/model/model.hpp: embed, block.0..L-1, head), tensors in storage order."""
    out = [("embed", [model.patch_embed.weight, model.patch_embed.bias, model.wpe, model.wte])]
    for l, blk in enumerate(model.blocks):
        mods = dict(blk.named_parameters())
        out.append((f"block.{l}", [mods[name] for _, name in BLOCK_TENSORS]))
    out.append(("head", [model.lnf.weight, model.lnf.bias]))
    return out


def flat(tensors, grad=False):
    return np.concatenate([(t.grad if grad else t).detach().float().reshape(-1).numpy() for t in tensors]).astype(np.float32)


def run(model, images, tokens, targets, dtype):
    model.zero_grad(set_to_none=True)
    b, ch, hh, ww = images.shape
    p = model.patch
    patches = (images.to(dtype).view(b, ch, hh // p, p, ww // p, p).permute(0, 2, 4, 1, 3, 5)
               .reshape(b, (hh // p) * (ww // p), ch * p * p))
    x = torch.cat([model.patch_embed(patches), F.embedding(tokens, model.wte)], dim=1) + model.wpe
    for blk in model.blocks:
        x = blk(x, model.mask)
    logits = F.linear(model.lnf(x), model.wte)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), targets, ignore_index=-100)
    loss.backward()
    return loss.item(), logits.detach().float().reshape(-1, VOCAB).numpy()


def main():
    torch.manual_seed(20261202)
    entry = step_model_entry(MODEL)
    model = bench_torch.StepModel(entry)
    with torch.no_grad():  # non-zero biases and LayerNorm parameters, so their paths are checked too
        for blk in model.blocks:
            for t in (blk.ln1.weight, blk.ln2.weight):
                t.copy_(1.0 + 0.1 * torch.randn_like(t))
            for t in (blk.ln1.bias, blk.ln2.bias, blk.qkv.bias, blk.proj.bias, blk.fc.bias, blk.fc_proj.bias):
                t.copy_(0.05 * torch.randn_like(t))
        model.lnf.weight.copy_(1.0 + 0.1 * torch.randn_like(model.lnf.weight))
        model.lnf.bias.copy_(0.05 * torch.randn_like(model.lnf.bias))
        model.patch_embed.bias.copy_(0.05 * torch.randn_like(model.patch_embed.bias))
    g = torch.Generator().manual_seed(7)
    m = MODEL
    pixels = torch.randint(0, 256, (BATCH, m["channels"], m["image_size"], m["image_size"]), generator=g)
    images = pixels.float() * (2.0 / 255.0) - 1.0  # joule's set_batch
    t = m["text_len"]
    tokens = torch.randint(0, 256, (BATCH, t), generator=g)
    tokens[:, 0], tokens[:, -1] = BOS, EOS
    n_img = entry["image_tokens"]
    targets = torch.full((BATCH, entry["seq"]), -100, dtype=torch.long)
    targets[:, n_img:n_img + t - 1] = tokens[:, 1:]
    targets = targets.reshape(-1)

    params = [flat(ts) for _, ts in groups(model)]
    loss32, logits32 = run(model, images, tokens, targets, torch.float32)
    grads32 = [flat(ts, grad=True) for _, ts in groups(model)]
    model16 = model.to(torch.bfloat16)  # every parameter rounded once, as joule's kernel weights
    loss16, logits16 = run(model16, images, tokens, targets, torch.bfloat16)
    grads16 = [flat(ts, grad=True) for _, ts in groups(model16)]

    path = os.path.join(HERE, "model_golden.h5")
    with h5py.File(path, "w") as f:
        f.attrs["model"] = json.dumps(MODEL)
        f.attrs["batch"] = BATCH
        f.attrs["torch_version"] = str(torch.__version__)
        f["pixels"] = pixels.numpy().astype(np.float32).reshape(-1)
        f["tokens"] = tokens.numpy().astype(np.int32).reshape(-1)
        for (name, _), p in zip(groups(model), params):
            f[f"params/{name}"] = p
        for tag, loss, logits, grads in (("fp32", loss32, logits32, grads32), ("bf16", loss16, logits16, grads16)):
            f[f"{tag}/loss"] = np.array([loss], dtype=np.float64)
            f[f"{tag}/logits"] = logits.astype(np.float32)
            for (name, _), gr in zip(groups(model), grads):
                f[f"{tag}/grads/{name}"] = gr
    print(f"wrote {path}: loss fp32 {loss32:.6f}, bf16 {loss16:.6f}", file=sys.stderr)


if __name__ == "__main__":
    main()
