// Times each operator's forward + backward pass at the shapes of one transformer block of a
// multimodal sequence (a preset of kPresets: ViT-Base for CPUs, ViT-Large for GPUs), and prints
// GFLOP/s from the stated FLOP counts (memory-bound operators get their count too, so that
// GFLOP/s and the PyTorch ratio stay comparable).
#include "bench/bench_ops.hpp"
#include "bench/bench_step.hpp"

#include "core/model/block.hpp"
#include "core/ops/adamw.hpp"
#include "core/ops/attention.hpp"
#include "core/ops/attention_gemm.hpp"
#include "core/ops/cross_entropy.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/embedding.hpp"
#include "core/ops/layernorm.hpp"
#include "core/ops/linear.hpp"
#include "core/ops/patch_embed.hpp"
#include "core/io/commit.hpp"
#include "core/precision/gemm.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

namespace joule::apps {

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Mem = Space::memory_space;
using T = float;

struct Shapes {
  int batch, seq, channels, heads, mlp, vocab, image, patch, adamw_params;
};

struct Preset {
  char const* name;
  char const* what;
  Shapes shapes;
};
// adamw_params: one block's parameters, 12 C^2 + 13 C.
constexpr Preset kPresets[] = {
    {"vit-base", "one ViT-Base block (C=768, 12 heads, MLP 3072), B=4 x 256 tokens: 196 patches of 224x224 + 60 text",
     {4, 256, 768, 12, 3072, 259, 224, 16, 7087872}},
    {"vit-large", "GPU-sized: ViT-Large widths (C=1024, 16 heads, MLP 4096), B=8 x 1024 tokens: 576 patches of 384x384 + 448 text",
     {8, 1024, 1024, 16, 4096, 259, 384, 16, 12596224}},
    {"tiny", "seconds, for smoke tests (C=128, B=2 x 64 tokens)", {2, 64, 128, 2, 512, 259, 64, 16, 200000}},
};

Shapes shapes_for(std::string const& preset) {
  std::string allowed;
  for (auto const& p : kPresets) {
    if (preset == p.name) return p.shapes;
    allowed += (allowed.empty() ? "" : ", ") + std::string(p.name);
  }
  throw std::invalid_argument("unknown bench preset '" + preset + "' (allowed: " + allowed + ")");
}

template <class View>
void fill(View const& v, std::mt19937& rng, double lo = -1, double hi = 1) {
  auto h = Kokkos::create_mirror_view(v);
  std::uniform_real_distribution<double> d(lo, hi);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = static_cast<typename View::value_type>(d(rng));
  Kokkos::deep_copy(v, h);
}

struct Result {
  std::string op, shape;
  double flops = 0, median_s = 0, min_s = 0;
};

// Attention's FLOPs over the (query, key) pairs the mask lets through: forward = 2 matmuls,
// backward = 5 (scores recomputed), 2 FLOPs per multiply-add.
double attention_flops(Shapes const& s, int head_dim, AttentionMask const& mask) {
  int const p = mask.open_prefix(s.seq);
  double pairs = 0;
  for (int i = 0; i < s.seq; ++i) pairs += std::min(s.seq, std::max(i + 1, p));
  return 14.0 * s.batch * s.heads * pairs * head_dim;
}

Result time_op(std::string op, std::string shape, double flops, int repeats,
               std::function<void()> const& fwd_bwd) {
  Space space;
  fwd_bwd();  // warm-up: first-touch pages, OpenBLAS buffers
  space.fence();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    Kokkos::Timer timer;
    fwd_bwd();
    space.fence();
    t.push_back(timer.seconds());
  }
  std::sort(t.begin(), t.end());
  return {std::move(op), std::move(shape), flops, t[t.size() / 2], t.front()};
}

}  // namespace

std::vector<std::string> bench_presets() {
  std::vector<std::string> out;
  for (auto const& p : kPresets) out.push_back(std::string(p.name) + ": " + p.what);
  return out;
}

namespace {

// Runs the operator suite, prints its table and adds preset, shapes and results to `report`.
void run_ops_bench(BenchOptions const& options, nlohmann::json& report) {
  Shapes const s = shapes_for(options.preset);
  Space space;
  std::mt19937 rng(7);
  int const n = s.batch * s.seq, c = s.channels, m = s.mlp;
  std::vector<Result> results;
  auto const nk = [](long a, long b, long cc) { return fmt::format("{}x{}x{}", a, b, cc); };

  fmt::print("joule bench: preset {}, execution space {}, {} threads, float32, median of {}\n",
             options.preset, Space::name(), Space().concurrency(), options.repeats);

  {  // Linear layers of the block: qkv (C -> 3C) and MLP up-projection (C -> M)
    for (auto [name, out] : {std::pair<char const*, int>{"linear_qkv", 3 * c}, {"linear_mlp_fc", m}}) {
      Tensor2<T, Mem> in("in", n, c), w("w", out, c), y("y", n, out), dy("dy", n, out),
          din("din", n, c), dw("dw", out, c);
      Tensor1<T, Mem> b("b", out), db("db", out);
      fill(in, rng), fill(w, rng), fill(b, rng), fill(dy, rng);
      ColumnSumWorkspace<T, Mem> const sums(column_sum_scratch(n, out), "bench.linear");  // once, as a step
      results.push_back(time_op(name, "N,in,out=" + nk(n, c, out), 6.0 * n * c * out, options.repeats, [&] {
        linear_forward(space, y, in, w, b);
        linear_backward(space, din, dw, db, dy, in, w, sums);
      }));
    }
  }
  {  // The qkv GEMM alone (forward, y = x W^T), fp32 beside bf16 with fp32 accumulation: what the
     // bf16 path costs or saves here (gemm_bf16: widened to fp32 on CPUs, cuBLASLt on CUDA)
    Tensor2<float, Mem> x("x", n, c), w("w", 3 * c, c), y("y", n, 3 * c);
    fill(x, rng), fill(w, rng);
    Tensor2<bf16, Mem> xb("xb", n, c), wb("wb", 3 * c, c), yb("yb", n, 3 * c);
    convert_precision(space, xb, x), convert_precision(space, wb, w);
    auto const work = Bf16GemmWorkspace<Mem>::for_space<Space>(xb.span(), wb.span(), yb.span(), "bench.gemm");
    std::string const shape = "N,in,out=" + nk(n, c, 3 * c);
    results.push_back(time_op("gemm_qkv_fp32", shape, 2.0 * n * c * 3 * c, options.repeats,
                              [&] { compat::gemm(space, "N", "T", 1.0f, x, w, 0.0f, y); }));
    results.push_back(time_op("gemm_qkv_bf16", shape, 2.0 * n * c * 3 * c, options.repeats,
                              [&] { gemm_bf16(space, "N", "T", 1.0f, xb, wb, 0.0f, yb, work); }));
    report["bf16_gemm_path"] = bf16_gemm_path<Space>();
  }
  {  // Attention, causal and image-prefix masks
    Tensor2<T, Mem> qkv("qkv", n, 3 * c), out("out", n, c), dout("dout", n, c), dqkv("dqkv", n, 3 * c);
    Tensor2<T, Mem> lse("lse", s.batch * s.heads, s.seq), delta("delta", s.batch * s.heads, s.seq);
    fill(qkv, rng), fill(dout, rng);
    int const hd = c / s.heads;
    int const n_image = (s.image / s.patch) * (s.image / s.patch);
    for (auto const& mask : {AttentionMask::causal(), AttentionMask::prefix(n_image)}) {
      double const flops = attention_flops(s, hd, mask);
      results.push_back(time_op(
          "attention_" + std::string(mask.name().substr(0, mask.name().find('('))),
          fmt::format("B,H,S,hd={}x{}x{}x{} {}", s.batch, s.heads, s.seq, hd, mask.name()), flops,
          options.repeats, [&] {
            attention_forward(space, out, lse, qkv, s.batch, s.heads, mask);
            attention_backward(space, dqkv, delta, dout, qkv, out, lse, s.batch, s.heads, mask);
          }));
    }
  }
  {  // Attention in bf16 (image-prefix mask): the fused kernel beside the tensor-core path (batched
     // GEMMs around an fp32 softmax; cuBLASLt on CUDA, GEMM by GEMM through the widening path here)
    Tensor2<float, Mem> qkv_f("qkv_f", n, 3 * c), dout_f("dout_f", n, c);
    fill(qkv_f, rng), fill(dout_f, rng);
    Tensor2<bf16, Mem> qkv("qkv", n, 3 * c), out("out", n, c), dout("dout", n, c), dqkv("dqkv", n, 3 * c);
    convert_precision(space, qkv, qkv_f), convert_precision(space, dout, dout_f);
    Tensor2<float, Mem> lse("lse", s.batch * s.heads, s.seq), delta("delta", s.batch * s.heads, s.seq);
    int const hd = c / s.heads;
    auto const mask = AttentionMask::prefix((s.image / s.patch) * (s.image / s.patch));
    auto const work = AttentionGemmWorkspace<Mem>::for_space<Space>(s.batch * s.heads, s.seq, hd, "bench.attention");
    double const flops = attention_flops(s, hd, mask);
    std::string const shape = fmt::format("B,H,S,hd={}x{}x{}x{} {} bf16", s.batch, s.heads, s.seq, hd, mask.name());
    results.push_back(time_op("attention_bf16", shape, flops, options.repeats, [&] {
      attention_forward(space, out, lse, qkv, s.batch, s.heads, mask);
      attention_backward(space, dqkv, delta, dout, qkv, out, lse, s.batch, s.heads, mask);
    }));
    results.push_back(time_op("attention_bf16_gemm", shape, flops, options.repeats, [&] {
      attention_forward_gemm(space, out, lse, qkv, s.batch, s.heads, mask, work);
      attention_backward_gemm(space, dqkv, delta, dout, qkv, out, lse, s.batch, s.heads, mask, work);
    }));
    report["bf16_attention_path"] = attention_path_text<Space, bf16>();
  }
  {  // LayerNorm
    Tensor2<T, Mem> x("x", n, c), y("y", n, c), dy("dy", n, c), dx("dx", n, c);
    Tensor1<T, Mem> w("w", c), b("b", c), dw("dw", c), db("db", c), mean("mean", n), rstd("rstd", n);
    fill(x, rng), fill(w, rng), fill(b, rng), fill(dy, rng);
    ColumnSumWorkspace<T, Mem> const sums(column_sum_scratch(n, c), "bench.layernorm");
    results.push_back(time_op("layernorm", "N,C=" + fmt::format("{}x{}", n, c), 20.0 * n * c,
                              options.repeats, [&] {
                                layernorm_forward(space, y, mean, rstd, x, w, b);
                                layernorm_backward(space, dx, dw, db, dy, x, w, mean, rstd, sums);
                              }));
  }
  {  // GELU on the MLP hidden layer
    Tensor2<T, Mem> x("x", n, m), y("y", n, m), dy("dy", n, m), dx("dx", n, m);
    fill(x, rng, -3, 3), fill(dy, rng);
    results.push_back(time_op("gelu", "N,M=" + fmt::format("{}x{}", n, m), 30.0 * n * m,
                              options.repeats, [&] {
                                gelu_forward(space, y, x);
                                gelu_backward(space, dx, dy, x);
                              }));
  }
  {  // Residual add
    Tensor2<T, Mem> a("a", n, c), b("b", n, c), y("y", n, c), dy("dy", n, c), da("da", n, c);
    fill(a, rng), fill(b, rng), fill(dy, rng);
    results.push_back(time_op("residual", "N,C=" + fmt::format("{}x{}", n, c), 2.0 * n * c,
                              options.repeats, [&] {
                                residual_forward(space, y, a, b);
                                residual_backward(space, da, dy);
                              }));
  }
  {  // Token + position embedding
    Tensor2<T, Mem> wte("wte", s.vocab, c), wpe("wpe", s.seq, c), y("y", n, c), dy("dy", n, c),
        dwte("dwte", s.vocab, c), dwpe("dwpe", s.seq, c);
    Kokkos::View<int*, Mem> tokens("tokens", n);
    fill(wte, rng), fill(wpe, rng), fill(dy, rng);
    {
      auto h = Kokkos::create_mirror_view(tokens);
      std::uniform_int_distribution<int> pick(0, s.vocab - 1);
      for (int i = 0; i < n; ++i) h(i) = pick(rng);
      Kokkos::deep_copy(tokens, h);
    }
    // The workspace is allocated once, as a training step does (Model owns one).
    EmbeddingBackwardWorkspace<Mem, T> const work(s.vocab, n, c, "bench.embedding");
    ColumnSumWorkspace<T, Mem> const sums(column_sum_scratch(s.batch, s.seq * c), "bench.position");
    results.push_back(time_op("embedding", "N,V,C=" + nk(n, s.vocab, c), 3.0 * n * c, options.repeats, [&] {
      embedding_forward(space, y, tokens, wte, wpe, s.seq);
      token_embedding_backward(space, dwte, dy, tokens, work);
      position_embedding_backward(space, dwpe, dy, s.seq, sums);
    }));
  }
  {  // Patch embedding of B images
    int const g = s.image / s.patch, rows = s.batch * g * g, feat = 3 * s.patch * s.patch;
    Tensor4<T, Mem> images("images", s.batch, 3, s.image, s.image), dimages;
    Tensor2<T, Mem> patches("patches", rows, feat), dpatches("dpatches", rows, feat), w("w", c, feat),
        dw("dw", c, feat), y("y", rows, c), dy("dy", rows, c);
    Tensor1<T, Mem> b("b", c), db("db", c);
    fill(images, rng, 0, 1), fill(w, rng), fill(b, rng), fill(dy, rng);
    ColumnSumWorkspace<T, Mem> const sums(column_sum_scratch(rows, c), "bench.patch_embed");
    results.push_back(time_op("patch_embed", fmt::format("B,img,P,C={}x{}x{}x{}", s.batch, s.image, s.patch, c),
                              4.0 * rows * feat * c, options.repeats, [&] {
                                patch_embed_forward(space, y, patches, images, w, b, s.patch);
                                patch_embed_backward(space, dimages, dpatches, dw, db, dy, patches, w, s.patch, sums);
                              }));
  }
  {  // Cross-entropy over the byte vocabulary
    Tensor2<T, Mem> logits("logits", n, s.vocab), dlogits("dlogits", n, s.vocab);
    Tensor1<T, Mem> lse("lse", n), losses("losses", n);
    Kokkos::View<int*, Mem> targets("targets", n);
    fill(logits, rng, -4, 4);
    {
      auto h = Kokkos::create_mirror_view(targets);
      std::uniform_int_distribution<int> pick(0, s.vocab - 1);
      for (int i = 0; i < n; ++i) h(i) = pick(rng);
      Kokkos::deep_copy(targets, h);
    }
    results.push_back(time_op("cross_entropy", "N,V=" + fmt::format("{}x{}", n, s.vocab), 10.0 * n * s.vocab,
                              options.repeats, [&] {
                                auto const r = cross_entropy_forward(space, lse, losses, logits, targets);
                                cross_entropy_backward(space, dlogits, logits, lse, targets, r.counted_rows);
                              }));
  }
  {  // AdamW over one block's parameters
    int const np = s.adamw_params;
    Tensor1<T, Mem> p("p", np), g("g", np), mo("m", np), v("v", np);
    fill(p, rng), fill(g, rng);
    long step = 0;
    AdamWConfig cfg;
    results.push_back(time_op("adamw", fmt::format("params={}", np), 12.0 * np, options.repeats,
                              [&] { adamw_update(space, p, g, mo, v, cfg, ++step); }));
  }
  {  // The whole pre-LN block
    BlockShape bs;
    bs.batch = s.batch, bs.seq = s.seq, bs.channels = c, bs.heads = s.heads, bs.mlp_hidden = m;
    bs.mask = AttentionMask::prefix((s.image / s.patch) * (s.image / s.patch));
    BlockParameters<T, Mem> params("block.", bs), grads("grad.", bs);
    BlockActivations<T, Mem> acts(bs);
    BlockWorkspace<T, Mem> work(bs);
    params.for_each([&](std::string const&, auto const& v) { fill(v, rng, -0.05, 0.05); });
    Tensor2<T, Mem> x("x", n, c), y("y", n, c), dy("dy", n, c), dx("dx", n, c);
    fill(x, rng), fill(dy, rng);
    double const flops = 6.0 * n * (3.0 * c * c + c * c + 2.0 * c * m) + attention_flops(s, c / s.heads, bs.mask);
    results.push_back(time_op("block", fmt::format("B,S,C,H,M={}x{}x{}x{}x{}", s.batch, s.seq, c, s.heads, m),
                              flops, options.repeats, [&] {
                                block_forward(space, bs, y, acts, params, x, work);
                                block_backward(space, bs, dx, grads, work, dy, x, acts, params);
                              }));
  }

  fmt::print("{:<20} {:<36} {:>10} {:>11} {:>9}\n", "operator", "shape", "GFLOP", "median ms", "GFLOP/s");
  report["preset"] = options.preset;
  report["shapes"] = {{"batch", s.batch}, {"seq", s.seq}, {"channels", c}, {"heads", s.heads},
                      {"mlp", m}, {"vocab", s.vocab}, {"image", s.image}, {"patch", s.patch},
                      {"adamw_params", s.adamw_params}};
  for (auto const& r : results) {
    fmt::print("{:<20} {:<36} {:>10.3f} {:>11.2f} {:>9.1f}\n", r.op, r.shape, r.flops * 1e-9,
               r.median_s * 1e3, r.flops * 1e-9 / r.median_s);
    report["results"].push_back({{"op", r.op}, {"shape", r.shape}, {"flops", r.flops},
                                 {"median_s", r.median_s}, {"min_s", r.min_s},
                                 {"gflops", r.flops * 1e-9 / r.median_s}});
  }
}

}  // namespace

int run_bench(BenchOptions const& options) {
  if (options.repeats < 1) throw std::invalid_argument("--repeats must be >= 1");
  nlohmann::json out;
  out["execution_space"] = Space::name();
  out["concurrency"] = Space().concurrency();
  out["repeats"] = options.repeats;
  if (options.ops) run_ops_bench(options, out);
  if (options.ops && options.steps) fmt::print("\n");
  if (options.steps)
    run_step_bench(options.step_shapes.empty() ? default_step_shape_names() : options.step_shapes,
                   options.repeats, out, parse_precision(options.precision));
  if (!options.json_path.empty()) {
    write_bench_json(options.json_path, out.dump(2) + "\n");
    fmt::print("wrote {}\n", options.json_path);
  }
  return 0;
}

void write_bench_json(std::string const& path, std::string const& text) {
  io::commit_file(path, "benchmark results", [&](std::string const& temporary) {
    std::ofstream f(temporary, std::ios::binary);
    f << text;
    f.close();
    if (!f) throw std::runtime_error(std::string("cannot write it (") + std::strerror(errno) + ")");
  });
}

}  // namespace joule::apps
