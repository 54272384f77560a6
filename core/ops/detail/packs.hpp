#pragma once
// 16-byte accesses for element-wise kernels. A thread that loads one bf16 at a time keeps 2 bytes
// in flight: a full H200 wave then has ~0.5 MB outstanding where HBM needs ~2.6 MB (bandwidth x
// latency) to stream at full rate, so such kernels reach about a fifth of it (docs/roofline.md).
// Here a thread moves packs of 16 bytes (8 bf16, 4 floats): one 128-bit load or store each on a
// GPU, a vectorised loop on a CPU. The arithmetic per element is the scalar kernel's: the same bits.
#include "core/detail/launch_shape.hpp"
#include "core/detail/vector_math.hpp"
#include "core/tensor.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace joule::detail {

inline constexpr int kPackBytes = 16;

// W consecutive elements of T, aligned as one access of up to 16 bytes.
template <class T, int W>
struct alignas(sizeof(T) * W < kPackBytes ? sizeof(T) * W : kPackBytes) Pack {
  T v[W];
};

// Elements per pack for a kernel over operands of these types: 16 bytes of the narrowest.
template <class... T>
constexpr int pack_width() {
  return kPackBytes / int(std::min({sizeof(T)...}));
}

template <int W, class T>
KOKKOS_INLINE_FUNCTION Pack<std::remove_const_t<T>, W> load_pack(T* at) {
  return *reinterpret_cast<Pack<std::remove_const_t<T>, W> const*>(at);
}
template <int W, class T>
KOKKOS_INLINE_FUNCTION void store_pack(T* at, Pack<T, W> const& value) {
  *reinterpret_cast<Pack<T, W>*>(at) = value;
}

// Where element-wise kernels take packs: on GPUs. On CPUs their row kernels vectorise the column
// loop as well, and the bf16 training step measured 4-9 % slower with packs on 2 cores; so CPUs
// keep the row kernels unless the launching thread asks for packs (PacksOnHost: the tests of the
// pack kernels, and the launch tools, which record what CUDA runs).
inline bool& packs_on_host() {
  static thread_local bool on = false;
  return on;
}
class PacksOnHost {
 public:
  PacksOnHost() : outer_(packs_on_host()) { packs_on_host() = true; }
  ~PacksOnHost() { packs_on_host() = outer_; }
  PacksOnHost(PacksOnHost const&) = delete;
  PacksOnHost& operator=(PacksOnHost const&) = delete;

 private:
  bool outer_;
};
template <class ExecutionSpace>
bool packs_here() {
  return !is_host_space<ExecutionSpace>() || packs_on_host();
}

// Whether `data` can be read in packs of W elements from element `offset` on.
template <int W, class T>
bool pack_aligned(T const* data) {
  return reinterpret_cast<std::uintptr_t>(data) % alignof(Pack<std::remove_const_t<T>, W>) == 0;
}

// Whether every view holds its elements contiguously from an address packs of W can start at,
// and n elements split into whole packs.
template <int W, class... V>
bool packable(std::size_t n, V const&... views) {
  return n % W == 0 && ((views.span_is_contiguous() && views.span() == n && pack_aligned<W>(views.data())) && ...);
}

// f(p) for every pack p in [0, packs): one thread a pack (on a GPU, neighbouring threads on
// neighbouring packs: coalesced).
template <class ExecutionSpace, class F>
void for_each_pack(ExecutionSpace const& space, char const* name, KernelWork const& work, long long packs, F const& f) {
  if (packs <= 0) return;
  note_launch(name, work, long(packs));
  Kokkos::parallel_for(label(name), Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<long long>>(space, 0, packs),
                       KOKKOS_LAMBDA(long long p) { f(p); });
}

}  // namespace joule::detail
