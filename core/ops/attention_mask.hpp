#pragma once
// Which keys each query of attention sees (core/ops/attention.hpp has the rule): none, causal, or
// prefix(n). Apart from the kernels, so that the model's declarations need no attention kernel.
#include "core/tensor.hpp"

#include <string>

namespace joule {

class AttentionMask {
 public:
  static AttentionMask none() { return AttentionMask(Kind::none, 0); }
  static AttentionMask causal() { return AttentionMask(Kind::causal, 0); }
  static AttentionMask prefix(int n_prefix) {
    require(n_prefix >= 0, "AttentionMask", "prefix length must be >= 0");
    return AttentionMask(Kind::prefix, n_prefix);
  }
  // The open prefix p for a sequence of length seq_len (the rule: core/ops/attention.hpp).
  int open_prefix(int seq_len) const {
    switch (kind_) {
      case Kind::none: return seq_len;
      case Kind::causal: return 0;
      case Kind::prefix: return n_prefix_ < seq_len ? n_prefix_ : seq_len;
    }
    return 0;
  }
  std::string name() const {
    switch (kind_) {
      case Kind::none: return "none";
      case Kind::causal: return "causal";
      case Kind::prefix: return "prefix(" + std::to_string(n_prefix_) + ")";
    }
    return "?";
  }

 private:
  enum class Kind { none, causal, prefix };
  AttentionMask(Kind kind, int n) : kind_(kind), n_prefix_(n) {}
  Kind kind_;
  int n_prefix_;
};

}  // namespace joule
