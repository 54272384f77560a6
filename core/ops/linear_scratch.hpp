#pragma once
// How much bf16 GEMM scratch a linear layer needs (core/ops/linear.hpp), apart from the kernels so
// that workspace declarations parse no operator.
#include <algorithm>
#include <cstddef>
#include <initializer_list>

namespace joule {

// The Bf16GemmWorkspace a bf16 linear layer of n rows, n_in inputs and n_out outputs needs for its
// forward and backward GEMMs: A is in or d_out, B the weight or in, a bf16 C out or d_in.
struct LinearGemmScratch {
  std::size_t a = 0, b = 0, c = 0;
};
inline LinearGemmScratch linear_gemm_scratch(int n, int n_in, int n_out) {
  std::size_t const in = std::size_t(n) * n_in, out = std::size_t(n) * n_out, w = std::size_t(n_out) * n_in;
  return {std::max(in, out), std::max(w, in), std::max(out, in)};
}

inline LinearGemmScratch max_scratch(std::initializer_list<LinearGemmScratch> parts) {
  LinearGemmScratch most;
  for (auto const& p : parts) most = {std::max(most.a, p.a), std::max(most.b, p.b), std::max(most.c, p.c)};
  return most;
}

}  // namespace joule
