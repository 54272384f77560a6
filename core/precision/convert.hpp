#pragma once
// Conversions between storage precisions of whole tensors: out[i] = narrow<Out>(widen(in[i]))
// (fp32 -> bf16 rounds to nearest even, bf16 -> fp32 is exact). One thread per element, neighbours
// on neighbouring elements (coalesced); the bits do not depend on the backend (core/precision/bf16.hpp).
#include "core/detail/launch_shape.hpp"
#include "core/precision/bf16.hpp"
#include "core/tensor.hpp"

namespace joule {

// out and in: contiguous views of the same extents (any rank), in memory `space` can reach.
template <class ExecutionSpace, class Out, class In>
void convert_precision(ExecutionSpace const& space, Out const& out, In const& in) {
  static_assert(unsigned(Out::rank) == unsigned(In::rank), "convert_precision: views of one rank");
  bool same = out.span_is_contiguous() && in.span_is_contiguous();
  for (unsigned r = 0; r < unsigned(Out::rank); ++r) same = same && out.extent(r) == in.extent(r);
  require(same, "convert_precision", "out " + shape_of(out) + " and in " + shape_of(in) + " must be contiguous and of one shape");
  using To = typename Out::non_const_value_type;
  auto* const dst = out.data();
  auto const* const src = in.data();
  auto const n = static_cast<long long>(in.span());
  detail::note_launch("convert_precision",
                      detail::streaming_work(double(n), sizeof(*src), sizeof(To), 0, int(sizeof(*src)), detail::WorkKind::copy),
                      long(n));
  Kokkos::parallel_for(
      label("convert_precision"), Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<long long>>(space, 0, n),
      KOKKOS_LAMBDA(long long i) { dst[i] = narrow<To>(widen(src[i])); });
}

}  // namespace joule
