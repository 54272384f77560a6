// The host loop of AdamW, compiled without floating-point contraction (core/CMakeLists.txt sets
// -ffp-contract=off for this file): the same operations as the device kernel, rounded the same
// way, so host- and device-updated groups agree bit for bit (see detail::mul in adamw.hpp).
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

}  // namespace joule::detail
