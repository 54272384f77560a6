#pragma once
// The alignment a GEMM may assume of a matrix's address (core/precision/cublaslt_gemm.cpp tells
// cuBLASLt's heuristic): apart from it, with no CUDA header, so that it is tested on every backend
// (tests/test_bf16.cpp).
#include <cstddef>
#include <cstdint>

namespace joule::detail {

// cuBLASLt's default, and the most it asks for: above it no algorithm gains anything.
inline constexpr std::uint32_t kMaxGemmAlignment = 256;

// The largest power of two, at most kMaxGemmAlignment, that divides `address` and (unless 0)
// `stride_bytes`: the alignment of every matrix of a strided batch whose first matrix starts at
// `address` and each next one stride_bytes after the last.
constexpr std::uint32_t address_alignment(std::uintptr_t address, std::size_t stride_bytes = 0) {
  std::uintptr_t const bits = address | std::uintptr_t(stride_bytes) | kMaxGemmAlignment;
  return std::uint32_t(bits & (~bits + 1));  // the lowest set bit
}

inline std::uint32_t pointer_alignment(void const* p, std::size_t stride_bytes = 0) {
  return address_alignment(reinterpret_cast<std::uintptr_t>(p), stride_bytes);
}

}  // namespace joule::detail
