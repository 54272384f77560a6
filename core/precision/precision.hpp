#pragma once
// A training run's precision (train.precision) and the one table that says, for each kind of
// tensor joule holds, how it is stored in that precision. The model's tensor declarations
// (core/model/model.hpp: held_t), the memory model (estimate_memory, estimate_optimizer_memory),
// the run log, `joule info` and docs/design.md's table read it; nothing else decides a precision.
//
// bf16 runs follow the standard mixed-precision recipe (Megatron-LM, DeepSpeed bf16): everything
// the kernels read or write between operators is bf16, everything that accumulates over steps,
// micro-batches or a reduction is fp32. bf16 has fp32's exponent range, so no loss scaling.
#include "core/precision/bf16.hpp"
#include "core/precision/precision_kind.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace joule {

enum class Held {
  kernel_weights,        // the weights the forward and backward kernels read (every parameter)
  activations,           // saved for the backward pass
  logits,                // the LM head's output, read by the cross-entropy and by every argmax
  activation_gradients,  // d_x of every operator
  parameter_gradients,   // accumulated over the micro-batches of a step; what the optimizer reads
  master_weights,        // what AdamW updates and checkpoints store
  moments,               // AdamW's m and v
  statistics,            // LayerNorm mean/rstd, softmax log-sum-exp, per-row losses: reductions
};

struct HeldPrecision {
  Held held;
  char const* name;
  bool bf16_in_bf16_runs;  // fp32 runs hold every kind in fp32
  char const* why;
};

// The table (docs/design.md "Precision" prints the same rows: tests/test_precision checks it).
inline constexpr HeldPrecision kHeldPrecision[] = {
    {Held::kernel_weights, "kernel weights", true,
     "tensor-core GEMM operands; a bf16 copy of the fp32 master weights, rounded once per update"},
    {Held::activations, "activations", true, "half the bytes kept from forward to backward"},
    {Held::logits, "logits", false,
     "8 bits would tie the top two tokens of a confident row and turn greedy captions into misses"},
    {Held::activation_gradients, "activation gradients", true, "GEMM operands of the backward pass"},
    {Held::parameter_gradients, "parameter gradients", false,
     "summed over micro-batches and rows; offloaded groups send them to the host as they are"},
    {Held::master_weights, "master weights", false, "an update of lr * 1e-3 is below half a bf16 ulp"},
    {Held::moments, "AdamW moments", false, "v spans many decades; sqrt(v) needs fp32"},
    {Held::statistics, "statistics and losses", false, "reductions over thousands of terms"},
};

constexpr HeldPrecision const& held_precision(Held h) {
  for (auto const& row : kHeldPrecision)
    if (row.held == h) return row;
  return kHeldPrecision[0];  // unreachable: every Held has a row (tests/test_precision)
}
constexpr bool held_in_bf16(Precision p, Held h) { return p == Precision::bf16 && held_precision(h).bf16_in_bf16_runs; }
constexpr std::size_t held_bytes(Precision p, Held h) { return held_in_bf16(p, h) ? sizeof(bf16) : sizeof(float); }

// The storage type of a kind of tensor in a precision.
template <Precision P, Held H>
using held_t = std::conditional_t<held_in_bf16(P, H), bf16, float>;

}  // namespace joule
