#!/usr/bin/python3
"""Runs the shapes of `joule bench` through PyTorch (float32) and prints joule's GFLOP/s next to
PyTorch's and their ratio, on the CPU (Debian's python3-torch) or on a GPU.

    joule bench --suite all --json build/bench.json     # operators and whole training steps
    /usr/bin/python3 apps/scripts/bench_torch.py build/bench.json            # CPU
    python3 apps/scripts/bench_torch.py --device cuda bench.json             # GPU (a CUDA build of joule)

FLOP counts are joule's (read from the JSON), so the ratio is the inverse ratio of median times.
PyTorch's attention is the fused F.scaled_dot_product_attention where torch has it (2.0 on; with
is_causal for the causal mask, a boolean mask for the image prefix), else the textbook one
(scores, masked_fill, softmax, @ v: it materialises the S x S matrix; Debian's torch 1.13).
On a GPU, TF32 is off for matrix products and convolutions (joule's GEMMs are plain float32),
and times are taken after torch.cuda.synchronize(). CPU threads: as many as joule used, with
OMP_WAIT_POLICY=PASSIVE unless set (see the import of torch below: Debian's torch otherwise spins
its OpenMP threads against its OpenBLAS threads).

Whole training steps (`joule bench --suite step` or `--suite all`: the JSON's "steps"; with
`--precision bf16` PyTorch's step runs under torch.autocast(dtype=torch.bfloat16)): each
shape is rebuilt in PyTorch from the JSON's model entry and timed as one step = forward, loss,
loss.backward(), clip_grad_norm_(1.0), AdamW.step(), zero_grad(set_to_none=True) (median of the
repeats after a warm-up step, whose loss is printed next to joule's: both near ln 259 = 5.56).
The model is joule's (core/model/model.cpp, block.hpp), checked against the code:
  - images [B, 3, H, W], pixels scaled to [-1, 1], cut into P x P patches with features ordered
    (channel, py, px) (joule's patchify, timed on both sides), then a Linear (3 P P -> C, bias);
  - text: token embedding wte [259, C]; x0 = concat(image tokens, text tokens) + wpe [S, C];
  - L pre-LN blocks: x2 = x + proj(attention(qkv(LN1(x)))), y = x2 + fc_proj(gelu_tanh(fc(LN2(x2))))
    with biases, LayerNorm eps 1e-5, MLP 4 C, attention scale 1/sqrt(hd), the prefix mask (image
    tokens see all image tokens and never text; text tokens see every image token and the text
    up to themselves);
  - final LN, logits = lnf . wte^T over all B*S positions (tied head, no bias), cross-entropy
    averaged over the text positions that have a next token (ignore_index=-100 elsewhere);
  - GPT-2 initialisation (N(0, 0.02); projections into the residual stream N(0, 0.02/sqrt(2L)));
    AdamW betas (0.9, 0.95), eps 1e-8, weight decay 0.01 on matrices only (patch embedding,
    qkv, proj, fc, fc_proj; not wte, wpe, biases, LayerNorms), constant lr from the JSON.
Differences: joule folds the clipping factor into its AdamW kernel (torch rescales the gradients
in place first; torch's clip factor is max_norm / (norm + 1e-6)); torch's AdamW on the CPU is its
default per-tensor loop (1.13 uses foreach only on CUDA); random data differs (same shapes and
distributions). Neither side times the copy of the batch into the model (joule's set_batch).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

# Debian's torch runs its own kernels on libgomp's threads and its matrix products on OpenBLAS's
# pthread build (libblas.so.3, its own thread pool). With libgomp's default active wait the idle
# OpenMP threads spin on the cores OpenBLAS's threads need: on the shared 2-core machine (load
# 3-4) a whole training step ran 5-15x slower and a Linear 1.7x slower. Passive waiting, unless
# the caller chose a policy (OMP_WAIT_POLICY=ACTIVE restores torch's default); set before libgomp
# starts. (joule's OpenBLAS is the OpenMP build: one pool, nothing to fight.)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


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

    def attention(open_prefix, dtype=torch.float32):
        qkv = rand(b, seq, 3 * c, lo=-1, hi=1).to(dtype).requires_grad_(True)
        dout = rand(b, seq, c).to(dtype)
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
    # joule's two bf16 attentions (the fused kernel and the tensor-core GEMM path) against one:
    # PyTorch's on bf16 tensors (SDPA picks its flash or memory-efficient kernel on a GPU).
    benches["attention_bf16"] = benches["attention_bf16_gemm"] = attention(n_image, torch.bfloat16)

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

    blk = StepBlock(c, h, m, layers=1).to(DEVICE)  # the block of the whole-step model
    bx, bdy = rand(b, seq, c, grad=True), rand(b, seq, c)
    bmask = allowed(seq, n_image)

    def block():
        blk(bx, bmask).backward(bdy)

    benches["block"] = block
    return benches


# ---- whole training steps -------------------------------------------------------------------

class StepBlock(torch.nn.Module):
    """joule's pre-LN block (core/model/block.hpp)."""

    def __init__(self, c, heads, mlp, layers):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(c, eps=1e-5), torch.nn.LayerNorm(c, eps=1e-5)
        self.qkv, self.proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.fc, self.fc_proj = torch.nn.Linear(c, mlp), torch.nn.Linear(mlp, c)
        for lin in (self.qkv, self.fc):
            torch.nn.init.normal_(lin.weight, 0.0, 0.02)
        for lin in (self.proj, self.fc_proj):  # residual projections
            torch.nn.init.normal_(lin.weight, 0.0, 0.02 / math.sqrt(2 * layers))
        for lin in (self.qkv, self.proj, self.fc, self.fc_proj):
            torch.nn.init.zeros_(lin.bias)

    def forward(self, x, mask):
        b, seq, c = x.shape
        h, hd = self.heads, c // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q = q.view(b, seq, h, hd).transpose(1, 2)
        k = k.view(b, seq, h, hd).transpose(1, 2)
        v = v.view(b, seq, h, hd).transpose(1, 2)
        if HAS_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            y = ((q @ k.transpose(-2, -1)) / math.sqrt(hd)).masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x2 = x + self.proj(y.transpose(1, 2).reshape(b, seq, c))
        return x2 + self.fc_proj(F.gelu(self.fc(self.ln2(x2)), approximate="tanh"))


class StepModel(torch.nn.Module):
    """joule's captioning transformer (core/model/model.hpp), from a "steps" entry's "model"."""

    def __init__(self, m):
        super().__init__()
        c, p, self.patch = m["d_model"], m["patch_size"], m["patch_size"]
        self.n_image, self.vocab = m["image_tokens"], m["vocab"]
        self.patch_embed = torch.nn.Linear(m["channels"] * p * p, c)
        torch.nn.init.normal_(self.patch_embed.weight, 0.0, 0.02)
        torch.nn.init.zeros_(self.patch_embed.bias)
        self.wte = torch.nn.Parameter(torch.empty(m["vocab"], c).normal_(0.0, 0.02))
        self.wpe = torch.nn.Parameter(torch.empty(m["seq"], c).normal_(0.0, 0.02))
        self.blocks = torch.nn.ModuleList(
            StepBlock(c, m["heads"], m["mlp"], m["layers"]) for _ in range(m["layers"]))
        self.lnf = torch.nn.LayerNorm(c, eps=1e-5)
        self.register_buffer("mask", allowed(m["seq"], self.n_image), persistent=False)

    def forward(self, images, tokens, targets):
        b, ch, hh, ww = images.shape
        p = self.patch
        patches = (images.view(b, ch, hh // p, p, ww // p, p).permute(0, 2, 4, 1, 3, 5)
                   .reshape(b, (hh // p) * (ww // p), ch * p * p))
        x = torch.cat([self.patch_embed(patches), F.embedding(tokens, self.wte)], dim=1) + self.wpe
        for blk in self.blocks:
            x = blk(x, self.mask)
        logits = F.linear(self.lnf(x), self.wte)  # tied LM head over all positions
        return F.cross_entropy(logits.reshape(-1, self.vocab), targets, ignore_index=-100)

    def parameter_groups(self, weight_decay):
        """Weight decay on matrices only, as joule (core/model/parameter_group.hpp)."""
        matrices = [self.patch_embed.weight] + [lin.weight for blk in self.blocks
                                                for lin in (blk.qkv, blk.proj, blk.fc, blk.fc_proj)]
        ids = {id(t) for t in matrices}
        rest = [t for t in self.parameters() if id(t) not in ids]
        return [{"params": matrices, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


BOS, EOS = 256, 257


def step_batch(m, batch):
    """Random pixels (scaled to [-1, 1] as joule's set_batch), captions BOS, random bytes, EOS;
    targets: the next text token at text positions, -100 at image positions and the last one."""
    g = torch.Generator().manual_seed(11)
    pixels = torch.randint(0, 256, (batch, m["channels"], m["image_size"], m["image_size"]), generator=g)
    images = (pixels.float() * (2.0 / 255.0) - 1.0).to(DEVICE)
    t = m["text_len"]
    tokens = torch.randint(0, 256, (batch, t), generator=g)
    tokens[:, 0], tokens[:, -1] = BOS, EOS
    targets = torch.full((batch, m["seq"]), -100, dtype=torch.long)
    targets[:, m["image_tokens"]:m["image_tokens"] + t - 1] = tokens[:, 1:]
    return images, tokens.to(DEVICE), targets.reshape(-1).to(DEVICE)


def time_torch_step(entry, repeats):
    """(median seconds, first-step loss) of PyTorch training steps at a "steps" entry's shape."""
    torch.manual_seed(1)
    opt_cfg = entry["optimizer"]
    model = StepModel(entry["model"]).to(DEVICE)
    opt = torch.optim.AdamW(model.parameter_groups(opt_cfg["weight_decay"]), lr=opt_cfg["lr"],
                            betas=(opt_cfg["beta1"], opt_cfg["beta2"]), eps=opt_cfg["eps"])
    images, tokens, targets = step_batch(entry["model"], entry["batch"])
    # joule's bf16 steps (`--precision bf16`: bf16 activations and weight copies, fp32 master state)
    # against PyTorch's usual mixed precision: autocast to bfloat16 around fp32 parameters.
    bf16 = entry.get("precision", "fp32") == "bf16"

    def step():
        with torch.autocast(device_type=DEVICE.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(images, tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), opt_cfg["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.item()  # waits for the step (GPU)
        sync()
        return value

    first_loss = step()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), first_loss


def print_steps(steps, repeats):
    precision = steps[0].get("precision", "fp32") if steps else "fp32"
    print(f"\nwhole training steps (forward, backward, clip, AdamW), {precision} (PyTorch: "
          f"{'autocast to bfloat16' if precision == 'bf16' else 'float32'}), median of {repeats} after a warm-up step")
    print(f"{'shape':<8} {'B x S':>10} {'L':>3} {'C':>5} {'joule ms':>10} {'torch ms':>10} "
          f"{'joule/torch':>12} {'loss@1 joule':>13} {'loss@1 torch':>13}")
    limit_lines = []
    for e in steps:
        m = e["model"]
        torch_s, torch_loss = time_torch_step(e, repeats)
        ratio = e["median_s"] / torch_s
        print(f"{e['name']:<8} {str(e['batch']) + ' x ' + str(m['seq']):>10} {m['layers']:>3} {m['d_model']:>5} "
              f"{e['median_s'] * 1e3:>10.1f} {torch_s * 1e3:>10.1f} {ratio:>12.2f} "
              f"{e['loss_step1']:>13.4f} {torch_loss:>13.4f}")
        limit_lines.append(
            f"{e['name']}: {e['flops']['total'] * 1e-9:.2f} GFLOP/step at KokkosBlas::gemm's "
            f"{e['gemm']['rate_gflops']:.1f} GFLOP/s (the step's {len(e['gemm']['calls'])} GEMM shapes) = "
            f"limit {e['limit_s'] * 1e3:.1f} ms; limit/step: joule {e['limit_fraction'] * 100:.1f}% "
            f"({e['median_s'] * 1e3:.1f} ms), torch {e['limit_s'] / torch_s * 100:.1f}% ({torch_s * 1e3:.1f} ms)")
    print("joule/torch: joule's step time over PyTorch's (< 1: joule faster; the goal is <= 0.9)")
    print("GEMM-bound limit (step FLOPs / KokkosBlas::gemm rate at the step's own GEMM shapes, same joule run; "
          "limit/step = 100% means a step as fast as its GEMMs alone, the goal for medium is >= 75%):")
    for line in limit_lines:
        print("  " + line)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("joule_json", help="output of `joule bench [--suite ops|step|all] --json FILE`")
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
    attention = "F.scaled_dot_product_attention" if HAS_SDPA else "textbook attention (no SDPA in this torch)"
    if "results" not in joule:  # a step-only JSON (joule bench --suite step)
        print(f"PyTorch {torch.__version__} (float32, {where}; {attention}) vs joule ({joule_where})")
        print_steps(joule.get("steps", []), repeats)
        return 0
    benches = make_benchmarks(joule["shapes"])

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
    if joule.get("steps"):
        print_steps(joule["steps"], repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
