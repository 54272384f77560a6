// The host loop of AdamW, compiled without floating-point contraction (core/CMakeLists.txt sets
// -ffp-contract=off for this file): the same operations as the device kernel, rounded the same
// way, each multiply-add fused exactly where AdamWElement fuses it (JOULE_ADAMW_FMA), so host- and
// device-updated groups agree bit for bit (see detail::mul_add in adamw.hpp).
#include "core/ops/adamw.hpp"

namespace joule::detail {

template <class T>
void adamw_host_range(AdamWElement<T> const& e, T* KOKKOS_RESTRICT param, T const* KOKKOS_RESTRICT grad,
                      T* KOKKOS_RESTRICT m, T* KOKKOS_RESTRICT v, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) e.apply(param[i], m[i], v[i], grad[i]);
}

template void adamw_host_range<float>(AdamWElement<float> const&, float*, float const*, float*, float*,
                                      std::size_t, std::size_t);
template void adamw_host_range<double>(AdamWElement<double> const&, double*, double const*, double*, double*,
                                       std::size_t, std::size_t);

namespace {
// Plain restrict pointers, as the in-place loop has: GCC 12 does not vectorise the loop when they
// are read from a struct (no vectype for the loads).
template <class T>
void range_into(AdamWElement<T> const& e, T const* KOKKOS_RESTRICT p0, T const* KOKKOS_RESTRICT m0,
                T const* KOKKOS_RESTRICT v0, T const* KOKKOS_RESTRICT grad, T* KOKKOS_RESTRICT p1,
                T* KOKKOS_RESTRICT m1, T* KOKKOS_RESTRICT v1, std::size_t begin, std::size_t end) {
  // (restrict says the buffers do not overlap; ivdep spares GCC its runtime check of it)
#pragma GCC ivdep
  for (std::size_t i = begin; i < end; ++i) {  // the same element update, from one buffer into another
    T p = p0[i], m = m0[i], v = v0[i];
    e.apply(p, m, v, grad[i]);
    p1[i] = p;
    m1[i] = m;
    v1[i] = v;
  }
}
}  // namespace

template <class T>
void adamw_host_range_into(AdamWElement<T> const& e, AdamWState<T const> in, T const* grad, AdamWState<T> out,
                           std::size_t begin, std::size_t end) {
  range_into(e, in.param, in.m, in.v, grad, out.param, out.m, out.v, begin, end);
}

template void adamw_host_range_into<float>(AdamWElement<float> const&, AdamWState<float const>, float const*,
                                           AdamWState<float>, std::size_t, std::size_t);
template void adamw_host_range_into<double>(AdamWElement<double> const&, AdamWState<double const>, double const*,
                                            AdamWState<double>, std::size_t, std::size_t);

}  // namespace joule::detail
