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
constexpr bool is_host_space() {
  return Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;
}

// expf as a polynomial (Cephes): n = round(x log2 e), r = x - n ln 2 in two parts, then
// 2^n * (1 + r + r^2 p(r)). Round-to-nearest by adding 1.5 * 2^23 (the integer then sits in the
// low mantissa bits, read back without a float-to-int conversion). Inputs are clamped to
// [-87, 88], where 2^n stays a normal number; joule's arguments (shifted logits and scores,
// GELU's -2u) below -87 give 2^-126 * (1 + r...) ~ 1e-38 instead of a denormal or 0.
KOKKOS_INLINE_FUNCTION float exp_polynomial(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
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
  std::int32_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  std::int32_t const e = (bits - 0x4B400000 + 127) << 23;
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
