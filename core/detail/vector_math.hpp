#pragma once
// Backend traits and the exp that host kernels vectorise.
//
// libm's expf is a scalar call: a loop that calls it is not vectorised (glibc offers vector
// variants only under -ffast-math). Host kernels (row operators, attention score rows) therefore
// use exp_of<Space>(), a polynomial in plain arithmetic (Cephes expf, within 3 ulp of expf,
// tested) on host backends, and the backend's own exp on GPUs.
#include "core/tensor.hpp"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace joule::detail {

template <class ExecutionSpace>
KOKKOS_INLINE_FUNCTION constexpr bool is_host_space() {
  return Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;
}

// expf as a polynomial (Cephes): n = round(x log2 e), r = x - n ln 2 in two parts, then
// 2^n * (1 + r + r^2 p(r)). Round-to-nearest by adding 1.5 * 2^23 (the integer then sits in the
// low mantissa bits, read back without a float-to-int conversion). Inputs are clamped to
// [-87, 88], where 2^n stays a normal number: below, ~1.6e-38 instead of a denormal or 0; above
// (and +inf), ~1.7e38 instead of inf. NaN stays NaN. The clamp works on the bit pattern as
// integers: GCC (with the default -ftrapping-math) does not if-convert float comparisons, and a
// loop with one is not vectorised; integer selects vectorise even on SSE2.
KOKKOS_INLINE_FUNCTION float exp_polynomial(float x) {
  std::int32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  std::int32_t const magnitude = bits & 0x7fffffff;
  std::int32_t const limit = bits < 0 ? 0x42AE0000 : 0x42B00000;  // 87.0f, 88.0f
  std::int32_t const clamped = (magnitude > limit && magnitude <= 0x7f800000) ? limit : magnitude;
  std::int32_t const signed_clamped = clamped | (bits & std::int32_t(0x80000000u));
  std::memcpy(&x, &signed_clamped, sizeof x);
  float const shifter = 12582912.0f;  // 1.5 * 2^23
  float const t = x * 1.44269504088896341f + shifter;
  float const n = t - shifter;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  std::uint32_t t_bits;  // unsigned: the shift below must not overflow a signed int (NaN inputs)
  std::memcpy(&t_bits, &t, sizeof t_bits);
  std::uint32_t const e = (t_bits - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof scale);
  return y * scale;
}

template <class ExecutionSpace, class T>
KOKKOS_INLINE_FUNCTION T exp_of(T x) {
  if constexpr (is_host_space<ExecutionSpace>() && std::is_same_v<T, float>)
    return exp_polynomial(x);
  else
    return math::exp(x);
}

}  // namespace joule::detail
