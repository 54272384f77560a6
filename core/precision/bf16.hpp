#pragma once
// bf16: bfloat16 storage, 1 sign, 8 exponent and 7 mantissa bits (fp32's range at 8 bits of
// precision), the type bf16 tensors hold on every backend. Arithmetic is never done in bf16:
// kernels widen to float (exactly: a bf16 is the top half of an fp32), compute, and round back.
//
// Why a type of joule's own: Kokkos' bhalf_t is a plain float in a host-only build, so a CPU
// suite could never see bf16 rounding; this one is 2 bytes everywhere, layout-compatible with
// CUDA's __nv_bfloat16 (cuBLAS reads and writes it directly), and its conversion is one function
// compiled for host and device, so the same float gives the same bits on every backend.
//
// float -> bf16 rounds to nearest, ties to even (IEEE 754's default and PyTorch's); values at or
// past the largest bf16 plus half an ulp become infinity, subnormals round like the rest, and
// every NaN becomes the quiet NaN 0x7FC0 (as torch.bfloat16 and Eigen do; CUDA's cvt gives 0x7FFF,
// which is one reason joule does not use it). bf16 -> float is exact.
#include <Kokkos_Macros.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(KOKKOS_ENABLE_CUDA) && defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

namespace joule {

namespace detail {

KOKKOS_INLINE_FUNCTION std::uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KOKKOS_INLINE_FUNCTION float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace detail

inline constexpr std::uint16_t kBf16QuietNaN = 0x7FC0;

// The bf16 bits nearest to f (ties to even): adding 0x7FFF plus the kept part's lowest bit and
// truncating rounds the dropped 16 bits exactly so; a carry out of the mantissa steps the
// exponent, and out of the largest exponent gives infinity (0x7F80), as IEEE rounding does.
KOKKOS_INLINE_FUNCTION std::uint16_t bf16_bits_from_float(float f) {
  std::uint32_t const u = detail::bits_of(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kBf16QuietNaN;
  return std::uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

KOKKOS_INLINE_FUNCTION float float_from_bf16_bits(std::uint16_t b) {
  return detail::float_of(std::uint32_t(b) << 16);
}

struct alignas(2) bf16 {
  std::uint16_t bits;

  // Trivial (a View of bf16 is plain memory: value-initialised elements are +0).
  bf16() = default;
  KOKKOS_INLINE_FUNCTION explicit bf16(float f) : bits(bf16_bits_from_float(f)) {}
  KOKKOS_INLINE_FUNCTION explicit operator float() const { return float_from_bf16_bits(bits); }

  KOKKOS_INLINE_FUNCTION static bf16 from_bits(std::uint16_t b) {
    bf16 x;
    x.bits = b;
    return x;
  }
};

static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "bf16 is 2 bytes, 2-aligned");
static_assert(std::is_trivially_copyable_v<bf16> && std::is_standard_layout_v<bf16>,
              "bf16 must be plain memory: copied by deep_copy and read by cuBLAS as __nv_bfloat16");
#if defined(KOKKOS_ENABLE_CUDA) && defined(__CUDACC__)
static_assert(sizeof(bf16) == sizeof(__nv_bfloat16) && alignof(bf16) == alignof(__nv_bfloat16),
              "bf16 must be layout-compatible with CUDA's __nv_bfloat16");
#endif

// A bf16's value as float (exact).
KOKKOS_INLINE_FUNCTION float to_float(bf16 x) { return float_from_bf16_bits(x.bits); }

// What a kernel computes in for a storage type (float for bf16, the type itself otherwise), and
// the two ends of every access: widen(x) reads a stored element exactly in its compute type,
// narrow<S>(v) stores a computed value as S (rounded to nearest even for bf16). For float and
// double both are the identity, so an operator written with them gives the bits it gave before.
template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<bf16> {
  using type = float;
};
template <class T>
using compute_t = typename compute_type<std::remove_cv_t<T>>::type;

KOKKOS_INLINE_FUNCTION float widen(bf16 x) { return to_float(x); }
KOKKOS_INLINE_FUNCTION float widen(float x) { return x; }
KOKKOS_INLINE_FUNCTION double widen(double x) { return x; }

template <class S, class U>
KOKKOS_INLINE_FUNCTION S narrow(U v) {
  if constexpr (std::is_same_v<S, bf16>)
    return bf16(float(v));
  else
    return S(v);
}

}  // namespace joule
