#!/usr/bin/python3
"""Runs the shapes of `joule bench` through PyTorch (float32) and prints joule's GFLOP/s next to
PyTorch's and their ratio, on the CPU (Debian's python3-torch) or on a GPU.

    joule bench --json build/bench.json
    /usr/bin/python3 apps/scripts/bench_torch.py build/bench.json            # CPU
    python3 apps/scripts/bench_torch.py --device cuda bench.json             # GPU (a CUDA build of joule)

FLOP counts are joule's (read from the JSON), so the ratio is the inverse ratio of median times.
PyTorch's attention is the fused F.scaled_dot_product_attention where torch has it (2.0 on; with
is_causal for the causal mask, a boolean mask for the image prefix), else the textbook one
(scores, masked_fill, softmax, @ v: it materialises the S x S matrix; Debian's torch 1.13).
On a GPU, TF32 is off for matrix products and convolutions (joule's GEMMs are plain float32),
and times are taken after torch.cuda.synchronize(). CPU threads: as many as joule used.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F


DEVICE = torch.device("cpu")
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def sync():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats):
    for _ in range(3 if DEVICE.type == "cuda" else 1):  # warm-up (GPU: kernel selection, caches)
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rand(*shape, lo=-1.0, hi=1.0, grad=False):
    t = torch.empty(*shape, device=DEVICE).uniform_(lo, hi)
    return t.requires_grad_(grad)


def allowed(seq, open_prefix):
    i = torch.arange(seq, device=DEVICE)[:, None]
    j = torch.arange(seq, device=DEVICE)[None, :]
    return (j <= i) | (j < open_prefix)


def make_benchmarks(s):
    b, seq, c, h, m, v = s["batch"], s["seq"], s["channels"], s["heads"], s["mlp"], s["vocab"]
    n, hd = b * seq, c // h
    n_image = (s["image"] // s["patch"]) ** 2
    benches = {}

    def linear(out_features):
        x, w, bias = rand(n, c, grad=True), rand(out_features, c, grad=True), rand(out_features, grad=True)
        dy = rand(n, out_features)
        return lambda: F.linear(x, w, bias).backward(dy)

    benches["linear_qkv"] = linear(3 * c)
    benches["linear_mlp_fc"] = linear(m)

    def attention(open_prefix):
        qkv = rand(b, seq, 3 * c, lo=-1, hi=1, grad=True)
        dout = rand(b, seq, c)
        mask = allowed(seq, open_prefix)

        def run():
            q, k, vv = qkv.split(c, dim=-1)
            q = q.view(b, seq, h, hd).transpose(1, 2)
            k = k.view(b, seq, h, hd).transpose(1, 2)
            vv = vv.view(b, seq, h, hd).transpose(1, 2)
            if HAS_SDPA and open_prefix == 0:
                y = F.scaled_dot_product_attention(q, k, vv, is_causal=True)
            elif HAS_SDPA:
                y = F.scaled_dot_product_attention(q, k, vv, attn_mask=mask)
            else:
                att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
                att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                y = att @ vv
            y = y.transpose(1, 2).reshape(b, seq, c)
            y.backward(dout)
        return run

    benches["attention_causal"] = attention(0)
    benches["attention_prefix"] = attention(n_image)

    x, w, bias, dy = rand(n, c, grad=True), rand(c, grad=True), rand(c, grad=True), rand(n, c)
    benches["layernorm"] = lambda: F.layer_norm(x, (c,), w, bias, eps=1e-5).backward(dy)
    xg, dyg = rand(n, m, lo=-3, hi=3, grad=True), rand(n, m)
    benches["gelu"] = lambda: F.gelu(xg, approximate="tanh").backward(dyg)
    ra, rb, rdy = rand(n, c, grad=True), rand(n, c, grad=True), rand(n, c)
    benches["residual"] = lambda: (ra + rb).backward(rdy)

    wte, wpe, edy = rand(v, c, grad=True), rand(seq, c, grad=True), rand(b, seq, c)
    tokens = torch.randint(0, v, (b, seq), device=DEVICE)
    pos = torch.arange(seq, device=DEVICE)
    benches["embedding"] = lambda: (F.embedding(tokens, wte) + F.embedding(pos, wpe)).backward(edy)

    img, p = s["image"], s["patch"]
    images = rand(b, 3, img, img, lo=0, hi=1)
    pw, pb = rand(c, 3, p, p, grad=True), rand(c, grad=True)
    pdy = rand(b, c, img // p, img // p)
    benches["patch_embed"] = lambda: F.conv2d(images, pw, pb, stride=p).backward(pdy)

    logits, targets = rand(n, v, lo=-4, hi=4, grad=True), torch.randint(0, v, (n,), device=DEVICE)
    benches["cross_entropy"] = lambda: F.cross_entropy(logits, targets).backward()

    params = rand(s["adamw_params"], grad=True)
    params.grad = rand(s["adamw_params"])
    opt = torch.optim.AdamW([params], lr=1e-3, weight_decay=0.01)
    benches["adamw"] = lambda: opt.step()

    blk = {
        "ln1": torch.nn.LayerNorm(c), "qkv": torch.nn.Linear(c, 3 * c), "proj": torch.nn.Linear(c, c),
        "ln2": torch.nn.LayerNorm(c), "fc": torch.nn.Linear(c, m), "fc_proj": torch.nn.Linear(m, c),
    }
    blk = {name: mod.to(DEVICE) for name, mod in blk.items()}
    bx, bdy = rand(b, seq, c, grad=True), rand(b, seq, c)
    bmask = allowed(seq, n_image)

    def block():
        y = blk["ln1"](bx)
        q, k, vv = blk["qkv"](y).split(c, dim=-1)
        q = q.view(b, seq, h, hd).transpose(1, 2)
        k = k.view(b, seq, h, hd).transpose(1, 2)
        vv = vv.view(b, seq, h, hd).transpose(1, 2)
        if HAS_SDPA:
            y = F.scaled_dot_product_attention(q, k, vv, attn_mask=bmask)
        else:
            y = ((q @ k.transpose(-2, -1)) / math.sqrt(hd)).masked_fill(~bmask, float("-inf")).softmax(-1) @ vv
        x2 = bx + blk["proj"](y.transpose(1, 2).reshape(b, seq, c))
        out = x2 + blk["fc_proj"](F.gelu(blk["fc"](blk["ln2"](x2)), approximate="tanh"))
        out.backward(bdy)

    benches["block"] = block
    return benches


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("joule_json", help="output of `joule bench --json FILE`")
    ap.add_argument("--repeats", type=int, default=None, help="default: as many as joule used")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda: where PyTorch runs")
    args = ap.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    with open(args.joule_json) as f:
        joule = json.load(f)
    threads = int(joule.get("concurrency", 1))
    repeats = args.repeats or int(joule.get("repeats", 5))
    if DEVICE.type == "cuda":
        if not torch.cuda.is_available():
            print("bench_torch.py: --device cuda, but this torch sees no GPU", file=sys.stderr)
            return 2
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        where = f"{torch.cuda.get_device_name()}, TF32 off"
        joule_where = joule["execution_space"]
    else:
        torch.set_num_threads(threads)
        where = f"CPU, {torch.get_num_threads()} threads"
        joule_where = f"{joule['execution_space']}, {threads} threads"
    benches = make_benchmarks(joule["shapes"])

    attention = "F.scaled_dot_product_attention" if HAS_SDPA else "textbook attention (no SDPA in this torch)"
    print(f"PyTorch {torch.__version__} (float32, {where}; {attention}) vs joule ({joule_where}), "
          f"preset {joule['preset']}, median of {repeats}")
    print(f"{'operator':<20} {'joule GFLOP/s':>14} {'torch GFLOP/s':>14} {'joule/torch':>12}")
    ratios, attention_lines = [], []
    for r in joule["results"]:
        if r["op"] not in benches:
            print(f"{r['op']:<20} {r['gflops']:>14.1f} {'(no torch twin)':>14}")
            continue
        t = timed(benches[r["op"]], repeats)
        torch_gflops = r["flops"] * 1e-9 / t
        ratio = r["gflops"] / torch_gflops
        ratios.append(ratio)
        print(f"{r['op']:<20} {r['gflops']:>14.1f} {torch_gflops:>14.1f} {ratio:>12.2f}")
        if r["op"].startswith("attention"):
            attention_lines.append(f"{r['op']} fwd+bwd: joule {r['gflops'] * 1e-3:.3g} TFLOP/s, "
                                   f"PyTorch {torch_gflops * 1e-3:.3g} TFLOP/s")
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"geometric mean of joule/torch: {geo:.2f}  (>1: joule faster)")
    for line in attention_lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
