// 16-byte packs (core/ops/detail/packs.hpp): the element-wise kernels and the attention path's
// head packing give the same bits whether they go by packs (aligned, contiguous tensors) or
// element by element (the same data one element off alignment, or a size packs do not divide),
// in place too; and the launch says which way it went.
#include "core/detail/launch_log.hpp"
#include "core/ops/attention_gemm.hpp"
#include "core/ops/elementwise.hpp"
#include "support/test_support.hpp"

#include <cstring>

using namespace joule;
using namespace joule::test;

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Mem = Space::memory_space;

// A [rows, cols] tensor over a buffer of its own, `offset` elements in: offset 0 is aligned for
// packs, offset 1 is not (any element type here is narrower than a pack).
template <class T>
struct Placed {
  Kokkos::View<T*, Mem> buffer;
  Tensor2<T, Mem> tensor;
  Placed(int rows, int cols, int offset)
      : buffer("placed", std::size_t(rows) * cols + 1), tensor(buffer.data() + offset, rows, cols) {}
};

template <class T>
std::vector<unsigned char> bytes_of(Tensor2<T, Mem> const& t) {
  auto h = Kokkos::create_mirror_view(t);
  Kokkos::deep_copy(h, t);
  std::vector<unsigned char> out(h.span() * sizeof(T));
  std::memcpy(out.data(), h.data(), out.size());
  return out;
}

template <class T>
void fill(Tensor2<T, Mem> const& t, std::uint64_t seed) {
  auto h = Kokkos::create_mirror_view(t);
  Rng rng(seed);
  std::uniform_real_distribution<double> dist(-5, 5);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = T(float(dist(rng)));
  Kokkos::deep_copy(t, h);
}

// The launch `label` made since `log` started: its threads and block.
detail::LaunchShape last_shape(detail::LaunchLog const& log, std::string const& label) {
  auto const all = log.by_label();
  auto const it = all.find(label);
  REQUIRE(it != all.end());
  return it->second.back();
}

// op(out, in_a, in_b) on aligned tensors and on the same values one element off: the same bits,
// the first by packs of W (a RangePolicy launch of n / W threads), the second by rows.
template <class T, class Op>
void check_like_scalar(char const* label, int rows, int cols, bool in_place, Op const& op) {
  INFO(label << " on [" << rows << ", " << cols << "], " << sizeof(T) << "-byte elements" << (in_place ? ", in place" : ""));
  constexpr int W = detail::kPackBytes / int(sizeof(T));
  bool const packs = (std::size_t(rows) * cols) % W == 0;
  std::vector<unsigned char> results[2];
  for (int offset : {0, 1}) {
    Placed<T> a(rows, cols, offset), b(rows, cols, offset), out(rows, cols, offset);
    fill(a.tensor, 1), fill(b.tensor, 2), fill(out.tensor, 3);
    detail::LaunchLog log;
    op(in_place ? a.tensor : out.tensor, a.tensor, b.tensor);
    Space().fence();
    auto const shape = last_shape(log, label);
    bool const by_packs = offset == 0 && packs;
    CHECK(shape.block == (by_packs ? 0 : detail::kDeviceRowsPerTeam * detail::kDeviceVectorLength));
    if (by_packs) CHECK(shape.threads == long(rows) * cols / W);
    results[offset] = bytes_of(in_place ? a.tensor : out.tensor);
  }
  CHECK(results[0] == results[1]);
}

template <class T>
void check_elementwise(int rows, int cols) {
  Space space;
  for (bool in_place : {false, true}) {
    check_like_scalar<T>("gelu_forward", rows, cols, in_place,
                         [&](auto const& out, auto const& x, auto const&) { gelu_forward(space, out, x); });
    check_like_scalar<T>("gelu_backward", rows, cols, in_place,  // d_x, d_out = a, x = b
                         [&](auto const& d_x, auto const& d_out, auto const& x) { gelu_backward(space, d_x, d_out, x); });
    check_like_scalar<T>("residual_forward", rows, cols, in_place,
                         [&](auto const& out, auto const& x, auto const& y) { residual_forward(space, out, x, y); });
  }
  check_like_scalar<T>("residual_backward", rows, cols, true,  // d_x += d_out: always in place
                       [&](auto const& d_x, auto const&, auto const& d_out) { residual_backward(space, d_x, d_out); });
}

}  // namespace

TEST_CASE("packs: element-wise kernels by 16-byte packs give the scalar kernels' bits", "[ops][packs]") {
  detail::PacksOnHost const here;  // as on a GPU
  check_elementwise<bf16>(13, 48);   // 624 elements: 78 packs of 8
  check_elementwise<bf16>(7, 33);    // 231: no whole packs, by rows
  check_elementwise<float>(5, 36);   // 180: 45 packs of 4
  check_elementwise<float>(3, 7);    // 21: by rows
  check_elementwise<double>(4, 10);  // 40: 20 packs of 2
}

TEST_CASE("packs: a CPU keeps its row kernels unless asked", "[ops][packs]") {
  if (!detail::is_host_space<Space>()) return;
  Space space;
  Placed<float> x(4, 8, 0), y(4, 8, 0);
  fill(x.tensor, 5);
  detail::LaunchLog log;
  gelu_forward(space, y.tensor, x.tensor);
  CHECK(last_shape(log, "gelu_forward").block == 128);  // the row kernel
  {
    detail::PacksOnHost const here;
    gelu_forward(space, y.tensor, x.tensor);
    CHECK(last_shape(log, "gelu_forward").block == 0);  // 8 packs of 4
    CHECK(last_shape(log, "gelu_forward").threads == 8);
  }
  gelu_forward(space, y.tensor, x.tensor);
  CHECK(last_shape(log, "gelu_forward").block == 128);
}

TEST_CASE("packs: attention's head packing by packs gives the scalar packing's bits", "[ops][packs][attention]") {
  Space space;
  for (int head_dim : {16, 64}) {
    int const batch = 3, seq = 11, heads = 2, channels = heads * head_dim, rows = batch * seq;
    detail::AttentionShape s;
    s.batch = batch, s.seq = seq, s.heads = heads, s.channels = channels, s.head_dim = head_dim;
    std::size_t const per_part = std::size_t(rows) * channels;
    std::vector<unsigned char> packed[2], back[2];
    for (int offset : {0, 1}) {
      INFO("head size " << head_dim << ", rows " << (offset ? "one element off" : "aligned"));
      Placed<bf16> qkv(rows, 3 * channels, offset), restored(rows, channels, offset);
      fill(qkv.tensor, 7);
      Kokkos::View<bf16*, Mem> heads_buffer("heads", 3 * per_part);
      bf16* const a = heads_buffer.data();
      detail::LaunchLog log;
      detail::move_heads<true>(space, "test_pack", qkv.tensor, 3, s, a, a + per_part, a + 2 * per_part);
      // part 1 (the keys) back into rows of C
      detail::move_heads<false>(space, "test_unpack", restored.tensor, 1, s, a + per_part, nullptr, nullptr);
      Space().fence();
      CHECK(last_shape(log, "test_pack").block == (offset == 0 ? 0 : 128));
      CHECK(last_shape(log, "test_unpack").block == (offset == 0 ? 0 : 128));
      auto h = Kokkos::create_mirror_view(heads_buffer);
      Kokkos::deep_copy(h, heads_buffer);
      packed[offset].resize(h.span() * 2);
      std::memcpy(packed[offset].data(), h.data(), packed[offset].size());
      back[offset] = bytes_of(restored.tensor);
      // The keys went where the layout says: head h of sample b, token i, dimension d.
      auto hq = Kokkos::create_mirror_view(qkv.tensor);
      Kokkos::deep_copy(hq, qkv.tensor);
      int const b = 2, i = 5, hh = 1, d = head_dim - 1;
      CHECK(h(per_part + (std::size_t(b * heads + hh) * seq + i) * head_dim + d).bits ==
            hq(b * seq + i, channels + hh * head_dim + d).bits);
    }
    CHECK(packed[0] == packed[1]);
    CHECK(back[0] == back[1]);
  }
}
