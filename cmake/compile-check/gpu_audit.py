#!/usr/bin/python3
"""The GPU audit (`make gpu-audit`; its resource part runs inside `make compile-check`).

Part A, resources: each kernel's registers, spill stores/loads, stack frame and static shared
memory as ptxas reports them (-Xptxas -v on the compile check's own nvcc batches, sm_90), and its
theoretical occupancy on an H200 (sm_90) at the block size it is launched with.
Part B, exposed parallelism: the launches of one training step recorded on the CPU
(`joule bench --suite launches`, a JSON file), each kernel's CUDA shape as the code states it.
The gate fails on a spill or a stack frame, on occupancy under 25 % at the launch block size, on a
team launch whose shared memory (static + Kokkos' team buffer + the team scratch it states) is more
than Kokkos' CUDA backend grants a block (48 KiB, not the chip's 227 KB opt-in: the launch contract
of core/detail/launch_shape.hpp, whose figures the launch record carries), and (when the launches
were recorded at the audited config, medium.json) on a per-step kernel exposing under a quarter of
a full H200 wave, unless the kernel is on the allow-list (gpu_audit_allow.json beside this script),
each entry with its reason. The contract has no allow-list: such a launch throws on a GPU.

Usage: gpu_audit.py [--launches FILE] [--allow FILE] [--json OUT] [--no-gate] PTXAS_LOG...
       gpu_audit.py --self-test
Standard library only (Debian's python3).
"""
import argparse
import json
import os
import re
import subprocess
import sys

# --- sm_90 (H100/H200) limits: the CUDA occupancy calculator's figures for compute capability 9.0
SM90 = dict(
    sms=132,                    # H200 SXM
    max_warps_per_sm=64,        # 2048 threads
    max_blocks_per_sm=32,
    regs_per_sm=65536,
    reg_alloc_unit=256,         # registers are allocated per warp in units of 256
    max_regs_per_thread=255,
    smem_per_sm=228 * 1024,
    smem_reserved_per_block=1024,
    smem_max_per_block=227 * 1024,  # with the opt-in Kokkos' team launch never makes: see kokkos_grant()
    smem_alloc_unit=128,
    warp=32,
    max_block=1024,
)
WAVE_THREADS = SM90["sms"] * SM90["max_warps_per_sm"] * SM90["warp"]  # 270,336: every SM full
MIN_WAVE_FRACTION = 0.25
MIN_OCCUPANCY = 0.25


def ceil_to(x, unit):
    return -(-x // unit) * unit


def occupancy(regs, block, smem=0, lim=SM90):
    """Theoretical occupancy (active warps / max warps per SM) of `block` threads per block using
    `regs` registers per thread and `smem` bytes of shared memory per block (static + dynamic).
    Returns (fraction, blocks per SM, what limits it)."""
    warps = -(-block // lim["warp"])
    if block < 1 or block > lim["max_block"] or regs > lim["max_regs_per_thread"]:
        return 0.0, 0, "invalid"
    limits = {"warps": lim["max_warps_per_sm"] // warps, "blocks": lim["max_blocks_per_sm"]}
    regs_per_warp = ceil_to(max(regs, 1) * lim["warp"], lim["reg_alloc_unit"])
    limits["registers"] = (lim["regs_per_sm"] // regs_per_warp) // warps
    if smem > lim["smem_max_per_block"]:
        return 0.0, 0, "shared memory"
    smem_block = ceil_to(smem, lim["smem_alloc_unit"]) + lim["smem_reserved_per_block"]
    limits["shared memory"] = lim["smem_per_sm"] // smem_block
    blocks = min(limits.values())
    by = min(limits, key=lambda k: (limits[k], k != "warps"))
    return blocks * warps / lim["max_warps_per_sm"], blocks, by


def kokkos_grant(launches):
    """What Kokkos' CUDA TeamPolicy launch grants a block, as the launch record states it (the figures
    of core/detail/launch_shape.hpp): (shared memory per block, team buffer fixed, per team thread).
    A record written before it carried them: the same figures (48 KiB; 16 B + 8 B a thread)."""
    l = launches or {}
    return (l.get("cuda_shared_per_block", 48 * 1024), l.get("cuda_team_buffer_fixed", 16),
            l.get("cuda_team_buffer_per_thread", 8))


def kokkos_team_buffer(team_size, launches=None):
    """The shared memory Kokkos' CUDA TeamPolicy parallel_for takes per block before the team
    scratch (Kokkos_Cuda_Parallel(_Team).hpp, 3.4 to 4.6: sizeof(double) * (team_size + 2)), where
    team_size is Kokkos' team size (block / vector_length), as the launch states it."""
    _, fixed, per_thread = kokkos_grant(launches)
    return fixed + per_thread * team_size


def best_occupancy(regs, smem=0, lim=SM90):
    """A RangePolicy's block size is Kokkos' choice: the best occupancy over the block sizes it
    considers (multiples of 32 up to 1024 that the register file can hold), and the largest block
    that reaches it. Returns (fraction, block)."""
    best = (0.0, 0)
    for block in range(lim["warp"], lim["max_block"] + 1, lim["warp"]):
        if max(regs, 1) * block > lim["regs_per_sm"]:
            break
        occ = occupancy(regs, block, smem, lim)[0]
        if occ >= best[0] - 1e-12:  # ties: the larger block (Kokkos' search starts from the largest)
            best = (occ, block)
    return best


# --- ptxas -v output ------------------------------------------------------------------------------
ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(sm_\w+)'")
PROPS = re.compile(r"ptxas info\s*: Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")
SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(text):
    """{mangled name: {regs, stack, spill_stores, spill_loads, smem}} for the entry functions
    (kernels) of a ptxas -v log; device functions that were not inlined are left out."""
    kernels, current, props_of = {}, None, None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            current = m.group(1)
            kernels.setdefault(current, dict(regs=0, stack=0, spill_stores=0, spill_loads=0, smem=0))
            props_of = None
            continue
        m = PROPS.search(line)
        if m:
            props_of = m.group(1)
            continue
        m = FRAME.search(line)
        if m and props_of in kernels:
            k = kernels[props_of]
            k["stack"], k["spill_stores"], k["spill_loads"] = (int(g) for g in m.groups())
            continue
        m = USED.search(line)
        if m and current in kernels:
            k = kernels[current]
            k["regs"] = int(m.group(1))
            s = SMEM.search(m.group(2))
            k["smem"] = int(s.group(1)) if s else 0
            current = None
    return kernels


def _tool(name):
    return next((os.path.join(p, name) for p in os.environ.get("PATH", "").split(os.pathsep)
                 if os.access(os.path.join(p, name), os.X_OK)), None)


def _llvm_lambdas(s):
    """llvm-cxxfilt's 'lambda'(int) / 'lambda0'(int) as c++filt's {lambda(int)#1} / {lambda(int)#2}."""
    out, i = [], 0
    for m in re.finditer(r"'lambda(\d*)'\(", s):
        if m.start() < i:
            continue
        depth, j = 0, m.end() - 1
        while j < len(s):
            depth += s[j] == "("
            depth -= s[j] == ")"
            if depth == 0:
                break
            j += 1
        n = int(m.group(1)) + 2 if m.group(1) else 1
        out.append(s[i:m.start()] + "{lambda" + s[m.end() - 1:j + 1] + f"#{n}}}")
        i = j + 1
    return "".join(out) + s[i:]


def demangle(names):
    """c++filt (binutils); names it cannot read (nested lambdas in template arguments) through
    llvm-cxxfilt where installed, its lambda spelling made c++filt's."""
    names = list(names)
    result = {n: n for n in names}
    for tool in ("cu++filt", "c++filt", "llvm-cxxfilt"):
        left = [n for n in names if result[n] == n]
        path = _tool(tool)
        if not left or not path:
            continue
        out = subprocess.run([path], input="\n".join(left) + "\n", capture_output=True, text=True).stdout.splitlines()
        if len(out) == len(left):
            for n, d in zip(left, out):
                result[n] = _llvm_lambdas(d) if tool == "llvm-cxxfilt" else d
    return result


def _skip_back(s, i, open_c, close_c):
    """s[i] == close_c: the index of its matching open_c."""
    depth = 0
    while i >= 0:
        if s[i] == close_c:
            depth += 1
        elif s[i] == open_c:
            depth -= 1
            if depth == 0:
                return i
        i -= 1
    return -1


def _enclosing(s, at):
    """The qualified function or class name that ends just before s[at] (skipping its parameter
    list, cv-qualifiers and template arguments)."""
    i = at - 1
    while i >= 0 and s[i] == " ":
        i -= 1
    if s[i - 4:i + 1] == "const":
        i -= 5
        while s[i] == " ":
            i -= 1
    if s[i] == ")":
        i = _skip_back(s, i, "(", ")") - 1
    if i >= 0 and s[i] == ">":
        i = _skip_back(s, i, "<", ">") - 1
    parts = []
    while True:
        j = i
        while j >= 0 and (s[j].isalnum() or s[j] in "_~{}"):
            j -= 1
        parts.insert(0, s[j + 1:i + 1])
        if j < 2 or s[j - 1:j + 1] != "::":
            break
        i = j - 2  # a scope: a namespace, or a class (template) whose member the function is
        if s[i] == ">":
            i = _skip_back(s, i, "<", ">") - 1
    return "::".join(parts)


LAMBDA = re.compile(r"::\{lambda\(")
DRIVER = re.compile(r"Kokkos::Impl::(ParallelFor|ParallelReduce|ParallelScan\w*|ParallelForMDRange\w*)\w*<")


def describe(demangled):
    """What a human recognises in a kernel's demangled name: the user's lambda (the deepest one:
    for_each_row's own lambda wraps the caller's) as 'function λN', or the functor's class, and the
    Kokkos pattern and policy. Returns dict(name, where, pattern, policy)."""
    # nvcc puts a unit's anonymous-namespace entities under _INTERNAL_<hash>_<unit>_cu_<hash>::
    s = re.sub(r"_INTERNAL_\w+::", "", demangled.replace("(anonymous namespace)", "{anon}"))
    pattern = m.group(1) if (m := DRIVER.search(s)) else ""
    policy = next((p for p in ("MDRangePolicy", "TeamPolicy", "RangePolicy") if "Kokkos::" + p in s), "")
    best, outers = None, []
    for m in LAMBDA.finditer(s):
        fn = _enclosing(s, m.start())
        k = m.end() - 1  # the lambda's '('
        close = k
        depth = 0
        while close < len(s):
            depth += s[close] == "("
            depth -= s[close] == ")"
            if depth == 0:
                break
            close += 1
        num = re.match(r"\)#(\d+)\}", s[close:])
        depth_here = s[:m.start()].count("<") - s[:m.start()].count(">") + \
            s[:m.start()].count("(") - s[:m.start()].count(")")
        if fn.startswith("joule::") and (not outers or outers[0][1] > depth_here):
            outers[:] = [(fn, depth_here)]
        if fn.startswith("joule::") and (best is None or depth_here > best[0]):
            best = (depth_here, fn, num.group(1) if num else "?")
    via = ""
    if best:
        fn = best[1]
        name = f"{fn} λ{best[2]}"
        outer = [f for f, _ in outers if f != fn]
        via = outer[0].split("::")[-1] if outer else ""
        if via:
            name += f" <- {via}"
    else:
        # A functor: the driver's first template argument without its own template arguments.
        fn = ""
        if m := DRIVER.search(s):
            rest = s[m.end():]
            name = re.match(r"[\w:]+", rest).group(0) if re.match(r"[\w:]+", rest) else rest[:60]
            fn = name
        else:
            name = re.match(r"(?:void )?([\w:]+)", s).group(1) if re.match(r"(?:void )?([\w:]+)", s) else s[:60]
            fn = name
    return dict(name=name, function=fn, via=via, pattern=pattern, policy=policy)


def snake(name):
    """'joule::detail::AttentionForwardKernel' -> 'attention_forward'; 'joule::Model::next_tokens'
    -> 'next_tokens'."""
    base = name.split("::")[-1]
    base = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", base).lower()
    base = base[:-len("_kernel")] if base.endswith("_kernel") else base
    # The GPU-shaped functors (AttentionForwardBlockKernel) launch under their operator's label.
    return base[:-len("_block")] if base.endswith("_block") else base


def label_matches(label, function, loose=False):
    """Does a launch label (as passed to label()/note_launch) name a kernel of this function?
    The labels follow the functions: the function's name, or its name and the part
    ('layernorm_backward_input'), or the function's name ends with the label. loose (for a label
    nothing matched otherwise): the function's name ends with the label less its last word
    ('embedding_backward_count' in token_embedding_backward)."""
    f = snake(function)
    if not f:
        return False
    if label == f or label.startswith(f + "_") or f.endswith("_" + label):
        return True
    stem = label.rsplit("_", 1)[0] if "_" in label else label
    return loose and (f == stem or f.endswith("_" + stem))


def display_name(r):
    return r["name"] + (f" ({r['pattern'].replace('Parallel', '').lower()})"
                        if r["pattern"] not in ("ParallelFor", "") else "")


# --- the audit --------------------------------------------------------------------------------
def load_kernels(paths):
    merged, where = {}, {}
    for p in paths:
        batch = os.path.basename(p)
        batch = re.sub(r"^log\.cuda\.|\.log$", "", batch)
        with open(p, errors="replace") as f:
            for mangled, k in parse_ptxas(f.read()).items():
                merged.setdefault(mangled, k)
                where.setdefault(mangled, []).append(batch)
    names = demangle(sorted(merged))
    rows = {}
    for mangled, k in merged.items():
        d = describe(names[mangled])
        if not d["name"].startswith("joule::") and "joule::" not in names[mangled]:
            d["name"] = "[kokkos] " + d["name"]
        key = (d["name"], d["policy"], d["pattern"])
        r = rows.setdefault(key, dict(d, instances=0, regs=0, stack=0, spill_stores=0, spill_loads=0, smem=0,
                                      batches=set(), example=names[mangled]))
        r["instances"] += 1
        for f in ("regs", "stack", "spill_stores", "spill_loads", "smem"):
            r[f] = max(r[f], k[f])  # the worst instantiation
        r["batches"].update(where[mangled])
    return list(rows.values())


def audit(kernels, launches, allow, wave_gate=False):
    """Fills in each kernel's block, occupancy and launches; returns the gate's failures."""
    shapes = {k["label"]: k for k in (launches or {}).get("kernels", [])}
    def fits(l, r, loose):  # a label's block says its policy: 0 for Range/MDRange, > 0 for a team
        return label_matches(l, r["function"], loose) and (shapes[l]["block"] > 0) == (r["policy"] == "TeamPolicy")
    for r in kernels:
        r["labels"], r["loose_labels"] = [], []
    for l in shapes:
        hits = [r for r in kernels if fits(l, r, False)]
        for r in hits or [r for r in kernels if fits(l, r, True)]:
            # a loose match may name several kernels: their launch blocks, not their launch counts
            (r["labels"] if hits else r["loose_labels"]).append(l)
    matched_labels = {l for r in kernels for l in r["labels"] + r["loose_labels"]}
    for r in kernels:
        team = r["policy"] == "TeamPolicy"
        r["per_step"] = sum(shapes[l]["launches"] for l in r["labels"])
        r["min_threads"] = min((shapes[l]["threads_min"] for l in r["labels"]), default=None)
        labels = r["labels"] + r["loose_labels"]
        if team:
            # the worst of the blocks it is launched with (one, normally)
            # shared memory: static (ptxas) + Kokkos' team buffer + the team scratch the launch states
            blocks = {(shapes[l]["block"], shapes[l].get("shared", 0),
                       kokkos_team_buffer(shapes[l].get("team_size", shapes[l]["block"]), launches)) for l in labels}
            at = sorted((occupancy(r["regs"], b, r["smem"] + buf + dyn)[0], b, dyn, r["smem"] + buf + dyn)
                        for b, dyn, buf in blocks)
            r["occupancy"], r["block"], r["dyn_smem"], r["block_smem"] = at[0] if at else (None, None, 0, 0)
            r["block_smem"] = max((a[3] for a in at), default=0)  # the most shared memory a launch of it asks
            r["block_note"] = "launch" if at else "unknown"
        else:
            r["occupancy"], r["block"] = best_occupancy(r["regs"], r["smem"])
            r["block_note"] = "best"
    failures = []
    allowed = {a["kernel"]: a for a in allow}
    for r in kernels:
        r["problems"], r["allowed"] = [], ""
        if not r["name"].startswith("joule::"):
            continue  # Kokkos' own kernels (deep_copy fills): listed, not gated
        why = []
        if r["spill_stores"] or r["spill_loads"] or r["stack"]:
            why.append(f"spills {r['spill_stores']}/{r['spill_loads']} B, stack {r['stack']} B")
        if r["occupancy"] is not None and r["occupancy"] < MIN_OCCUPANCY:
            why.append(f"occupancy {r['occupancy']:.0%} at block {r['block']}")
        grant = kokkos_grant(launches)[0]
        over = r.get("block_smem", 0) > grant  # Kokkos throws at launch: no allow-list
        if over:
            failures.append((display_name(r), f"shared memory {r['block_smem']} B per block > {grant} B, what Kokkos "
                                              "grants a CUDA team (static + team buffer + team scratch)"))
        r["problems"] = why + ([f"shared memory {r['block_smem']} B > {grant} B"] if over else [])
        if over:
            continue
        key = next((k for k in allowed if k in (r["name"], display_name(r)) or k in r["labels"]), None)
        if why and key:
            r["allowed"] = allowed[key]["reason"]
        elif why:
            failures.append((display_name(r), "; ".join(why)))
    # Part B: the threads each kernel of the step exposes (labels as recorded).
    for k in (launches or {}).get("kernels", []):
        k["allowed"], k["problem"] = "", ""
        if wave_gate and k["threads_min"] < MIN_WAVE_FRACTION * WAVE_THREADS:
            k["problem"] = f"{k['threads_min']:,} threads = {k['threads_min'] / WAVE_THREADS:.1%} of a wave"
            if k["label"] in allowed:
                k["allowed"] = allowed[k["label"]]["reason"]
            else:
                failures.append((k["label"], k["problem"]))
    unmatched = sorted(set(shapes) - matched_labels)
    return failures, unmatched


def fmt_threads(n):
    return "-" if n is None else f"{n:,}"


def print_tables(kernels, launches, unmatched, failures, wave_gate):
    out = []
    out.append("== Part A: kernels (ptxas -v, sm_90; worst over instantiations) ==")
    out.append("occupancy: theoretical, at the launch block (TeamPolicy: team_size x vector_length, from the "
               "recorded launches) or the best block Kokkos can choose (RangePolicy/MDRange: 'best');")
    out.append("smem: static shared memory (ptxas) + the team scratch the launch states (TeamPolicy; KB), "
               "which the occupancy counts with Kokkos' team buffer (8 B x (team size + 2)); their sum must be "
               f"within the {kokkos_grant(launches)[0]:,} B Kokkos grants a CUDA block")
    h = f"{'kernel':<58} {'policy':<8} {'n':>2} {'regs':>4} {'spill st/ld':>11} {'stack':>5} {'smem':>11} " \
        f"{'block':>9} {'occ':>5} {'step launches':>13} {'min threads':>11}  verdict"
    out.append(h)
    out.append("-" * len(h))
    pol = {"TeamPolicy": "team", "RangePolicy": "range", "MDRangePolicy": "mdrange", "": "?"}
    for r in sorted(kernels, key=lambda r: (not r["name"].startswith("joule::"), r["name"], r["policy"])):
        name = display_name(r)
        blk = "-" if r["block"] is None else (f"{r['block']} best" if r["block_note"] == "best" else str(r["block"]))
        occ = "-" if r["occupancy"] is None else f"{r['occupancy']:.0%}"
        dyn = r.get("dyn_smem", 0)
        smem = f"{r['smem']}+{dyn / 1024:.1f}K" if dyn else str(r["smem"])
        verdict = "ok"
        if r.get("problems"):
            verdict = ("allowed: " + r["allowed"][:40]) if r["allowed"] else "FAIL: " + "; ".join(r["problems"])
        elif not r["name"].startswith("joule::"):
            verdict = "(kokkos, not gated)"
        elif r["policy"] == "TeamPolicy" and r["block"] is None:
            verdict = "ok? block unknown (no recorded launch)"
        out.append(f"{name[:58]:<58} {pol.get(r['policy'], r['policy'])[:8]:<8} {r['instances']:>2} {r['regs']:>4} "
                   f"{r['spill_stores']:>5}/{r['spill_loads']:<5} {r['stack']:>5} {smem:>11} {blk:>9} {occ:>5} "
                   f"{(r['per_step'] or '-'):>13} {fmt_threads(r['min_threads']):>11}  {verdict}")
    if launches:
        out.append("")
        out.append(f"== Part B: launches of one training step: {launches.get('config', '?')} "
                   f"({launches.get('shape', '')}) ==")
        h = f"{'label':<32} {'launches':>8} {'threads min':>12} {'threads max':>12} {'block':>6} {'wave min':>9}  verdict"
        out.append(h)
        out.append("-" * len(h))
        for k in sorted(launches["kernels"], key=lambda k: k["threads_min"]):
            out.append(f"{k['label']:<32} {k['launches']:>8} {k['threads_min']:>12,} {k['threads_max']:>12,} "
                       f"{(k['block'] or 'kokkos'):>6} {k['threads_min'] / WAVE_THREADS:>9.1%}  "
                       + (("allowed: " + k["allowed"][:50]) if k.get("allowed") else
                          ("FAIL: " + k["problem"]) if k.get("problem") else "ok" if wave_gate else "-"))
        out.append(f"a full H200 wave: {SM90['sms']} SMs x {SM90['max_warps_per_sm'] * SM90['warp']} threads = "
                   f"{WAVE_THREADS:,}; the gate wants >= {MIN_WAVE_FRACTION:.0%} "
                   f"({int(MIN_WAVE_FRACTION * WAVE_THREADS):,})"
                   + ("" if wave_gate else " (NOT applied: no --wave-gate, these launches are not the audited config's)"))
        if unmatched:
            out.append("labels with no kernel found in the ptxas logs (GEMMs are cuBLAS's): " + ", ".join(unmatched))
    out.append("")
    if failures:
        out.append(f"gpu-audit: FAILED: {len(failures)} kernel(s) (allow-list: cmake/compile-check/gpu_audit_allow.json)")
        for n, why in failures:
            out.append(f"  {n}: {why}")
    else:
        out.append("gpu-audit: passed")
    print("\n".join(out))


def self_test():
    # Figures of NVIDIA's occupancy calculator for compute capability 9.0.
    assert occupancy(32, 128) == (1.0, 16, "warps"), occupancy(32, 128)
    assert occupancy(64, 256)[0] == 0.5
    assert occupancy(255, 128)[:2] == (0.125, 2)
    assert occupancy(40, 256)[0] == 0.75  # 40 regs -> 1280/warp -> 51 warps -> 6 blocks of 8
    assert occupancy(32, 1024, smem=100 * 1024)[:2] == (1.0, 2)
    assert occupancy(16, 64, smem=48 * 1024)[1] == 4  # (48 KB + 1 KB reserved) x 4 <= 228 KB
    assert occupancy(16, 32)[1] == 32 and occupancy(16, 32)[0] == 0.5  # 32 blocks/SM of one warp
    assert best_occupancy(128) == (0.25, 512) and best_occupancy(64)[0] == 0.5
    assert best_occupancy(32) == (1.0, 1024) and best_occupancy(38) == (51 / 64, 544), best_occupancy(38)  # 51 warps fit
    assert best_occupancy(255)[0] == 0.125
    sample = """ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'
ptxas info    : Function properties for _Z3fooPf
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 96 registers, used 1 barriers, 24 bytes cumulative stack size, 2048 bytes smem, 400 bytes cmem[0]
ptxas info    : Function properties for _Z6helperv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z3barv' for 'sm_90'
ptxas info    : Function properties for _Z3barv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 18 registers, used 0 barriers
"""
    k = parse_ptxas(sample)
    assert set(k) == {"_Z3fooPf", "_Z3barv"}, k
    assert k["_Z3fooPf"] == dict(regs=96, stack=24, spill_stores=8, spill_loads=12, smem=2048), k
    assert k["_Z3barv"] == dict(regs=18, stack=0, spill_stores=0, spill_loads=0, smem=0), k
    d = describe("void Kokkos::Impl::cuda_parallel_launch_local_memory<Kokkos::Impl::ParallelFor<joule::detail::"
                 "for_each_row<Kokkos::Cuda, joule::layernorm_forward<Kokkos::Cuda, V>(Kokkos::Cuda const&, V const&)"
                 "::{lambda(Kokkos::Impl::CudaTeamMember const&, int)#1}>(Kokkos::Cuda const&, char const*, int, "
                 "joule::layernorm_forward<Kokkos::Cuda, V>(Kokkos::Cuda const&, V const&)::{lambda(Kokkos::Impl::"
                 "CudaTeamMember const&, int)#1} const&)::{lambda(Kokkos::Impl::CudaTeamMember const&)#1}, "
                 "Kokkos::TeamPolicy<Kokkos::Cuda>, Kokkos::Cuda> >(X)")
    assert d["name"] == "joule::layernorm_forward λ1 <- for_each_row" and d["policy"] == "TeamPolicy" and \
        d["via"] == "for_each_row", d
    d = describe("void Kokkos::Impl::cuda_parallel_launch_local_memory<Kokkos::Impl::ParallelFor<joule::detail::"
                 "AttentionForwardKernel<float, V>, Kokkos::TeamPolicy<Kokkos::Cuda>, Kokkos::Cuda> >(X)")
    assert d["name"] == "joule::detail::AttentionForwardKernel", d
    d = describe("void Kokkos::Impl::cuda_parallel_launch_local_memory<Kokkos::Impl::ParallelReduce<Kokkos::Impl::"
                 "CombinedFunctorReducer<_INTERNAL_d7654d7a_13_core_train_cu_31eccd6d::joule::(anonymous namespace)::queue_grad_norm_part<V>(Kokkos::Cuda const&,"
                 " V const&)::{lambda(int, double&)#1}, R>, Kokkos::RangePolicy<Kokkos::Cuda>, Kokkos::Cuda> >(X)")
    assert d["name"] == "joule::{anon}::queue_grad_norm_part λ1" and d["pattern"] == "ParallelReduce", d
    assert label_matches("grad_norm_part", d["function"])
    assert label_matches("attention_forward", "joule::detail::AttentionForwardKernel")
    assert label_matches("layernorm_backward_input", "joule::layernorm_backward")
    assert label_matches("embedding_backward_count", "joule::token_embedding_backward", loose=True)
    assert not label_matches("embedding_backward_wte", "joule::position_embedding_backward")
    assert not label_matches("layernorm_forward", "joule::layernorm_backward")
    assert not label_matches("gelu_forward", "joule::gelu_backward")
    # The gate: a team kernel at 255 registers and block 128 (12.5 %) fails, unless allowed; a
    # launch of 1,000 threads fails the wave gate only with wave_gate.
    def one():
        return [dict(name="joule::f λ1", function="joule::f", policy="TeamPolicy", pattern="ParallelFor",
                     regs=255, stack=0, spill_stores=0, spill_loads=0, smem=0)]
    launches = dict(kernels=[dict(label="f", launches=2, threads_min=1000, threads_max=1000, block=128)])
    ks = one()
    failures, unmatched = audit(ks, launches, [])
    assert [f[0] for f in failures] == ["joule::f λ1"] and ks[0]["block"] == 128 and not unmatched, failures
    failures, _ = audit(one(), json.loads(json.dumps(launches)), [], wave_gate=True)
    assert [f[0] for f in failures] == ["joule::f λ1", "f"], failures
    failures, _ = audit(one(), launches, [dict(kernel="joule::f λ1", reason="r")])
    assert failures == [], failures
    # The team scratch a launch states bounds occupancy: at 32 registers 8 blocks of 256 fit by
    # registers (100 %); 40 KB of scratch (+ 2,064 B of Kokkos' buffer for a team of 256) 5 times
    # (62.5 %), 47,088 B (the most Kokkos grants that team: 48 KiB in all) 4 times (50 %). One byte
    # more fails the launch contract, allow-list or not; the same bytes in a team of 8 (vector length
    # 32: a buffer of 80 B) fit.
    def two(regs):
        return [dict(name="joule::g λ1", function="joule::g", policy="TeamPolicy", pattern="ParallelFor",
                     regs=regs, stack=0, spill_stores=0, spill_loads=0, smem=0)]
    for shared, team, occ, fails in ((0, 256, 1.0, False), (40 * 1024, 256, 0.625, False), (47088, 256, 0.5, False),
                                     (47089, 256, None, True), (47089, 8, 0.5, False)):
        ks = two(32)
        failures, _ = audit(ks, dict(kernels=[dict(label="g", launches=1, threads_min=1 << 20, threads_max=1 << 20,
                                                   block=256, team_size=team, shared=shared)]),
                            [dict(kernel="joule::g λ1", reason="r")])
        assert ks[0]["dyn_smem"] == shared and (occ is None or ks[0]["occupancy"] == occ), (shared, team, ks[0])
        assert [f[0] for f in failures] == (["joule::g λ1"] if fails else []), (shared, team, failures)
    assert kokkos_team_buffer(256) == 2064 and kokkos_team_buffer(4) == 48
    print("gpu_audit.py self-test: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ptxas", nargs="*", help="ptxas -v logs (the compile check's nvcc batches)")
    ap.add_argument("--launches", help="JSON from `joule bench --suite launches`")
    ap.add_argument("--allow", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_audit_allow.json"))
    ap.add_argument("--json", help="write the table as JSON here")
    ap.add_argument("--no-gate", action="store_true", help="print the tables, exit 0")
    ap.add_argument("--wave-gate", action="store_true",
                    help="the launches are the audited config's (medium.json): gate on the threads each exposes")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        self_test()
        return 0
    if not a.ptxas:
        ap.error("no ptxas logs given")
    kernels = load_kernels(a.ptxas)
    if not kernels:
        print("gpu-audit: FAILED: no kernels in the ptxas logs (was nvcc run with -Xptxas -v?)")
        return 1
    launches = None
    if a.launches:
        with open(a.launches) as f:
            launches = json.load(f)
    with open(a.allow) as f:
        allow = json.load(f)["allow"]
    for e in allow:
        if not e.get("reason"):
            print(f"gpu-audit: FAILED: allow-list entry {e.get('kernel')} has no reason")
            return 1
    failures, unmatched = audit(kernels, launches, allow, a.wave_gate)
    print_tables(kernels, launches, unmatched, failures, a.wave_gate)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(kernels=[dict(r, batches=sorted(r["batches"])) for r in kernels],
                           launches=launches, failures=failures, unmatched_labels=unmatched), f, indent=1)
    return 0 if a.no_gate or not failures else 1


if __name__ == "__main__":
    sys.exit(main())
