#pragma once
// The most likely class of a row of logits[N, V]: the first index of the row's maximum, as
// torch.argmax (and the host loop `if (x > best)`) picks it. Greedy decoding and the exact-caption
// check read it; the logits never leave the device.
#include "core/detail/launch_shape.hpp"
#include "core/ops/cross_entropy_result.hpp"
#include "core/precision/bf16.hpp"
#include "core/tensor.hpp"

#include <string>

namespace joule {

// argmax_v x(r, v) over v < classes (every column for kEveryColumn; the rest pad the row) for one
// row, inside a kernel (serial over V: a row's V logits are a few hundred bytes' worth, and the
// callers run one thread per row).
template <class X>
KOKKOS_INLINE_FUNCTION int argmax_of_row(X const& x, int r, int classes = kEveryColumn) {
  int const vocab = classes >= 1 && classes < int(x.extent(1)) ? classes : int(x.extent(1));
  int best = 0;
  auto top = widen(x(r, 0));
  for (int v = 1; v < vocab; ++v) {
    auto const value = widen(x(r, v));
    if (value > top) best = v, top = value;
  }
  return best;
}

// picks[r] = argmax_v x(r, v) over v < classes (every column for kEveryColumn) for every row.
template <class ExecutionSpace, class Picks, class X>
void row_argmax(ExecutionSpace const& space, Picks const& picks, X const& x, int classes = kEveryColumn) {
  int const n = x.extent(0);
  require(int(picks.extent(0)) == n && x.extent(1) >= 1 &&
              (classes == kEveryColumn || (classes >= 1 && classes <= int(x.extent(1)))), "row_argmax",
          "picks " + shape_of(picks) + ", x " + shape_of(x) + ", classes " + std::to_string(classes));
  int const read = sizeof(typename X::value_type);
  detail::note_launch("row_argmax", detail::streaming_work(double(n) * x.extent(1), read, 0, 1, read), n);
  Kokkos::parallel_for(
      label("row_argmax"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      KOKKOS_LAMBDA(int r) { picks(r) = argmax_of_row(x, r, classes); });
}

}  // namespace joule
