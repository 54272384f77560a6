#pragma once
// What cross_entropy_forward returns (core/ops/cross_entropy.hpp), and the target that counts for
// nothing, and the class count that means every column: apart from the kernels, so that the model's declarations need none of them.

namespace joule {

inline constexpr int kIgnoreIndex = -100;
// `classes` of the cross-entropy and argmax kernels: every column of the logits is a class (fewer:
// the rest pad the rows to an aligned width, ModelConfig::vocab_padded).
inline constexpr int kEveryColumn = -1;

struct CrossEntropyResult {
  double loss = 0;      // mean over counted rows (0 if none)
  int counted_rows = 0;  // rows whose target is not ignore_index
};

}  // namespace joule
