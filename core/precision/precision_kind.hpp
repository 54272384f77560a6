#pragma once
// train.precision as the configuration names it: plain C++, no Kokkos, so that what records a
// configuration (core/config/config, the run log) builds without the kernels' types. What each
// precision stores where is precision.hpp's table.
#include <stdexcept>
#include <string>

namespace joule {

enum class Precision { fp32, bf16 };

// "fp32" / "bf16" (the configuration's spelling); parse_precision throws std::invalid_argument
// naming the allowed values.
inline char const* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }
inline Precision parse_precision(std::string const& text) {
  if (text == "fp32") return Precision::fp32;
  if (text == "bf16") return Precision::bf16;
  throw std::invalid_argument("precision \"" + text + "\": allowed are \"fp32\" and \"bf16\"");
}

}  // namespace joule
