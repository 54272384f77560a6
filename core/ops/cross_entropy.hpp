#pragma once
// Softmax cross-entropy over logits[N, V] with integer targets[N]. Rows whose target equals
// ignore_index (image positions, padding) contribute nothing; the loss is the mean over the rest,
// as PyTorch's F.cross_entropy(reduction="mean", ignore_index=...). Logits and their gradient
// may be bf16: the softmax, lse, losses and sums are in the compute type (fp32), each logit
// widened as read, each gradient rounded once as stored. `classes` < V: only the first `classes`
// columns are classes, the rest pad the rows to an aligned width (ModelConfig::vocab_padded):
// they are never read, and their gradient is 0.
#include "core/detail/launch_shape.hpp"
#include "core/ops/cross_entropy_result.hpp"
#include "core/detail/row_kernels.hpp"
#include "core/precision/bf16.hpp"
#include "core/tensor.hpp"

#include <limits>
#include <string>

namespace joule {

namespace detail {
inline int class_count(int columns, int classes, char const* op) {
  require(classes == kEveryColumn || (classes >= 1 && classes <= columns), op,
          std::to_string(classes) + " classes in logits of " + std::to_string(columns) + " columns");
  return classes == kEveryColumn ? columns : classes;
}
}  // namespace detail

// Writes lse[r] = log(sum_v exp(logits[r, v])) for every row (the backward pass needs it) and
// losses[r] = lse[r] - logits[r, target] (0 for ignored rows and for out-of-range targets, which
// cross_entropy_forward reports). Queued on `space`; nothing comes back to the host.
template <class ExecutionSpace, class Lse, class Losses, class Logits, class Targets>
void cross_entropy_rows(ExecutionSpace const& space, Lse const& lse, Losses const& losses, Logits const& logits,
                        Targets const& targets, int ignore_index = kIgnoreIndex, int classes = kEveryColumn) {
  using T = typename Lse::non_const_value_type;
  int const n = logits.extent(0), vocab = detail::class_count(int(logits.extent(1)), classes, "cross_entropy_forward");
  require(int(targets.extent(0)) == n && int(lse.extent(0)) == n && int(losses.extent(0)) == n,
          "cross_entropy_forward", "logits " + shape_of(logits) + ", targets " +
                                       shape_of(targets) + ", lse " + shape_of(lse));
  int const logit_bytes = sizeof(typename Logits::value_type);
  auto const work = detail::streaming_work(double(n) * vocab, logit_bytes, 0, 6, logit_bytes);
  detail::for_each_row(space, "cross_entropy_forward", work, n,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    T const row_max = detail::vector_max<ExecutionSpace, T>(team, vocab, [&](int v) { return T(widen(logits(r, v))); });
    T const sum = detail::vector_sum<ExecutionSpace, T>(
        team, vocab, [&](int v) { return detail::exp_of<ExecutionSpace>(T(widen(logits(r, v)) - row_max)); });
    detail::once_per_row(team, [&]() {
      T const l = row_max + math::log(sum);
      lse(r) = l;
      int const t = targets(r);
      losses(r) = (t == ignore_index || t < 0 || t >= vocab) ? T(0) : l - widen(logits(r, t));
    });
  });
}

// out() = sum_r losses[r] in double, into a device scalar (the loss left on the device): queued,
// the host does not wait. The same sum as cross_entropy_forward's.
template <class ExecutionSpace, class Out, class Losses>
void cross_entropy_forward_sum(ExecutionSpace const& space, Out const& out, Losses const& losses) {
  detail::note_launch("cross_entropy_forward_sum", detail::streaming_work(double(losses.extent(0)), sizeof(typename Losses::value_type), 0, 1, sizeof(typename Losses::value_type)),
                      long(losses.extent(0)));
  Kokkos::parallel_reduce(
      label("cross_entropy_forward_sum"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, losses.extent(0)),
      KOKKOS_LAMBDA(int r, double& s) { s += losses(r); }, out);
}

// cross_entropy_rows, then the mean loss and the counted rows on the host (a wait for the
// device). Throws if a target is neither ignore_index nor a valid class: the check costs no pass
// of its own (out-of-range rows are counted in the final reduction, their logits never indexed).
template <class ExecutionSpace, class Lse, class Losses, class Logits, class Targets>
CrossEntropyResult cross_entropy_forward(ExecutionSpace const& space, Lse const& lse,
                                         Losses const& losses, Logits const& logits,
                                         Targets const& targets, int ignore_index = kIgnoreIndex,
                                         int classes = kEveryColumn) {
  int const n = logits.extent(0), vocab = detail::class_count(int(logits.extent(1)), classes, "cross_entropy_forward");
  cross_entropy_rows(space, lse, losses, logits, targets, ignore_index, classes);
  CrossEntropyResult result;
  double total = 0;
  int bad = 0;
  detail::note_launch("cross_entropy_forward_sum", detail::streaming_work(n, sizeof(typename Losses::value_type) + sizeof(typename Targets::value_type), 0, 1, sizeof(typename Losses::value_type)), n);
  Kokkos::parallel_reduce(
      label("cross_entropy_forward_sum"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      KOKKOS_LAMBDA(int r, double& s, int& counted, int& invalid) {
        int const t = targets(r);
        s += losses(r);
        counted += t != ignore_index ? 1 : 0;
        invalid += (t != ignore_index && (t < 0 || t >= vocab)) ? 1 : 0;
      },
      total, result.counted_rows, bad);
  require(bad == 0, "cross_entropy_forward",
          std::to_string(bad) + " target(s) neither ignore_index (" +
              std::to_string(ignore_index) + ") nor in [0, " + std::to_string(vocab) + ")");
  result.loss = result.counted_rows ? total / result.counted_rows : 0.0;
  return result;
}

// d_logits[r, v] = d_loss / counted_rows * (softmax(logits)[r, v] - [v == target[r]])
// (overwritten; zero for ignored rows and for the columns past `classes`)
template <class ExecutionSpace, class DLogits, class Logits, class Lse, class Targets>
void cross_entropy_backward(ExecutionSpace const& space, DLogits const& d_logits,
                            Logits const& logits, Lse const& lse, Targets const& targets,
                            int counted_rows, double d_loss = 1.0,
                            int ignore_index = kIgnoreIndex, int classes = kEveryColumn) {
  using S = typename DLogits::non_const_value_type;
  using T = compute_t<S>;
  int const n = logits.extent(0), columns = logits.extent(1),
            vocab = detail::class_count(columns, classes, "cross_entropy_backward");
  require(d_logits.extent(0) == logits.extent(0) && d_logits.extent(1) == logits.extent(1),
          "cross_entropy_backward", "d_logits " + shape_of(d_logits) + ", logits " + shape_of(logits));
  T const scale = counted_rows ? T(d_loss / counted_rows) : T(0);
  int const logit_bytes = sizeof(typename Logits::value_type);
  auto const work = detail::streaming_work(double(n) * columns, logit_bytes, sizeof(S), 6, logit_bytes);
  detail::for_each_row(space, "cross_entropy_backward", work, n,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const t = targets(r);
    T const row_scale = t == ignore_index ? T(0) : scale, row_lse = lse(r);
    detail::vector_for(team, columns, [&](int v) {
      T const p = v < vocab ? detail::exp_of<ExecutionSpace>(T(widen(logits(r, v)) - row_lse)) : T(0);
      d_logits(r, v) = narrow<S>(v < vocab ? row_scale * (p - (v == t ? T(1) : T(0))) : T(0));
    });
  });
}

}  // namespace joule
