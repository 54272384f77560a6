#pragma once
// What cross_entropy_forward returns (core/ops/cross_entropy.hpp), and the target that counts for
// nothing: apart from the kernels, so that the model's declarations need none of them.

namespace joule {

inline constexpr int kIgnoreIndex = -100;

struct CrossEntropyResult {
  double loss = 0;      // mean over counted rows (0 if none)
  int counted_rows = 0;  // rows whose target is not ignore_index
};

}  // namespace joule
