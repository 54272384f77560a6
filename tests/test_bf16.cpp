// The bf16 storage type (core/precision/bf16.hpp) and whole-tensor conversions
// (core/precision/convert.hpp): against a reference rounding written another way (exact distances
// in double), over every bf16, edge values and random bit patterns; against torch.bfloat16
// (tests/golden/make_bf16_golden.py); and the same bits from a kernel on every backend as on the host.
#include "core/io/h5file.hpp"
#include "core/precision/convert.hpp"
#include "core/precision/detail/alignment.hpp"
#include "core/precision/gemm.hpp"
#include "core/ops/attention.hpp"
#include "core/ops/attention_gemm.hpp"
#include "core/ops/cross_entropy.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/embedding.hpp"
#include "core/ops/layernorm.hpp"
#include "core/ops/linear.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>
#include "support/naive_attention.hpp"
#include "support/test_support.hpp"
#include "support/test_paths.hpp"

using namespace joule;
using namespace joule::test;

// The operators' bf16 paths are checked on the default execution space (the GPU on GPU builds);
// their fp32 paths, on which the bf16 checks rest, run on every backend in their own tests. (One
// space keeps this file's compile time, instantiating attention and GEMMs twice per backend, in
// CI's budget.) The conversions run on every backend.
#define JOULE_TEST_OP_SPACES Kokkos::DefaultExecutionSpace

namespace {

float float_of_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The bf16 nearest to f by value, ties to the even mantissa: the two bf16 neighbours of f are
// its truncation and the next one away from zero; their distances to f are exact in double.
// Past the largest bf16 the next neighbour is 2^128 (where infinity stands for rounding).
std::uint16_t reference_bf16(float f) {
  if (std::isnan(f)) return kBf16QuietNaN;
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isinf(f)) return std::uint16_t(u >> 16);
  std::uint16_t const lo = std::uint16_t(u >> 16);  // toward zero
  std::uint16_t const hi = std::uint16_t(lo + 1);   // away from zero (0x7F80: infinity)
  double const x = std::fabs(double(f));
  double const v_lo = std::fabs(double(float_of_bits(std::uint32_t(lo) << 16)));
  double const v_hi = (hi & 0x7FFF) == 0x7F80 ? std::ldexp(1.0, 128) : std::fabs(double(float_of_bits(std::uint32_t(hi) << 16)));
  double const d_lo = x - v_lo, d_hi = v_hi - x;
  if (d_lo < d_hi) return lo;
  if (d_hi < d_lo) return hi;
  return (lo & 1) ? hi : lo;
}

std::string hex(std::uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", v);
  return b;
}

std::vector<std::uint32_t> edge_bits() {
  std::vector<std::uint32_t> v = {
      0x00000000, 0x80000000, 0x7F800000, 0xFF800000,              // +-0, +-inf
      0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF,  // quiet, signalling, payload NaNs
      0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001,  // overflow to inf and just under it
      0x7F7E8000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00008000,  // ties, subnormals
      0x00018000, 0x00007FFF, 0x007F8000, 0x00800000, 0x3F808000, 0x3F818000};
  for (std::uint32_t e = 0; e < 256; ++e)  // a tie and its neighbours at every exponent, both signs
    for (std::uint32_t m : {0u, 1u, 0x7Fu})
      for (std::uint32_t low : {0x7FFFu, 0x8000u, 0x8001u})
        for (std::uint32_t sign : {0u, 0x80000000u}) v.push_back(sign | (e << 23) | (m << 16) | low);
  return v;
}

}  // namespace

TEST_CASE("bf16 is two bytes that widen exactly and round back to themselves", "[bf16]") {
  STATIC_REQUIRE(sizeof(bf16) == 2);
  int nans = 0;
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    float const f = float_from_bf16_bits(std::uint16_t(b));
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    REQUIRE(u == b << 16);  // exact widening: the top half of a float
    std::uint16_t const back = bf16_bits_from_float(f);
    if (std::isnan(f)) {
      ++nans;
      REQUIRE(back == kBf16QuietNaN);
    } else if (back != b) {
      FAIL("bf16 " << hex(b) << " widened and rounded back gives " << hex(back));
    }
  }
  REQUIRE(nans == 2 * 127);  // exponent all ones, mantissa nonzero, both signs
}

TEST_CASE("bf16 rounding matches the reference on edge values and random floats", "[bf16]") {
  std::vector<std::uint32_t> bits = edge_bits();
  Rng rng(20261202);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 200000; ++i) bits.push_back(any(rng));
  int mismatches = 0;
  for (std::uint32_t u : bits) {
    float const f = float_of_bits(u);
    std::uint16_t const got = bf16_bits_from_float(f), want = reference_bf16(f);
    if (got != want && ++mismatches <= 10)
      UNSCOPED_INFO("float " << hex(u) << " (" << f << "): got " << hex(got) << ", reference " << hex(want));
  }
  REQUIRE(mismatches == 0);

  // Named cases, so a failure says which rule broke.
  CHECK(bf16_bits_from_float(float_of_bits(0x3F808000)) == 0x3F80);  // tie, even stays
  CHECK(bf16_bits_from_float(float_of_bits(0x3F818000)) == 0x3F82);  // tie, odd rounds up
  CHECK(bf16_bits_from_float(float_of_bits(0x3F808001)) == 0x3F81);  // above the tie
  CHECK(bf16_bits_from_float(std::numeric_limits<float>::max()) == 0x7F80);   // overflow to inf
  CHECK(bf16_bits_from_float(-std::numeric_limits<float>::max()) == 0xFF80);
  CHECK(bf16_bits_from_float(float_of_bits(0x7F7F7FFF)) == 0x7F7F);  // largest bf16, not inf
  CHECK(bf16_bits_from_float(float_of_bits(0x00018000)) == 0x0002);  // subnormal tie, odd up
  CHECK(bf16_bits_from_float(float_of_bits(0x007F8000)) == 0x0080);  // subnormal carries into normal
  CHECK(bf16_bits_from_float(-0.0f) == 0x8000);
  CHECK(bf16_bits_from_float(float_of_bits(0xFF800001)) == kBf16QuietNaN);  // signalling NaN, negative
  CHECK(to_float(bf16(1.0f / 3.0f)) == float_of_bits(0x3EAB0000));
}

TEST_CASE("bf16 rounding matches torch.bfloat16 (golden file)", "[bf16][golden]") {
  char const* dir = std::getenv("JOULE_GOLDEN_DIR");
  io::H5File const f((dir ? std::string(dir) : joule::test::source_path("tests/golden")) + "/bf16_golden.h5", io::H5File::Mode::read);
  auto const in = f.read<std::int64_t>("float_bits");
  auto const torch = f.read<std::int32_t>("bf16_bits");
  REQUIRE(in.size() == torch.size());
  REQUIRE(in.size() > 10000);
  int nans = 0, mismatches = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    float const x = float_of_bits(std::uint32_t(in[i]));
    auto const got = bf16_bits_from_float(x);
    auto const want = std::uint16_t(torch[i]);
    if (std::isnan(x)) {  // PyTorch's NaN bits depend on its code path (the generator says why)
      ++nans;
      REQUIRE(std::isnan(float_from_bf16_bits(want)));
      REQUIRE(std::isnan(float_from_bf16_bits(got)));
    } else if (got != want && ++mismatches <= 10) {
      UNSCOPED_INFO("float " << hex(std::uint32_t(in[i])) << ": joule " << hex(got) << ", torch " << hex(want));
    }
  }
  REQUIRE(mismatches == 0);
  REQUIRE(nans > 0);
}

TEMPLATE_TEST_CASE("bf16 conversions of whole tensors give the host's bits on every backend", "[bf16]",
                   JOULE_TEST_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space const space;
  std::vector<std::uint32_t> bits = edge_bits();
  Rng rng(7);
  std::uniform_int_distribution<std::uint32_t> any;
  while (bits.size() % 997 != 0) bits.push_back(any(rng));  // an awkward length: 997 * k
  int const rows = 997, cols = int(bits.size() / 997);
  Tensor2<float, Mem> x("x", rows, cols), back("back", rows, cols);
  Tensor2<bf16, Mem> y("y", rows, cols);
  {
    auto h = Kokkos::create_mirror_view(x);
    std::memcpy(h.data(), bits.data(), bits.size() * sizeof(float));
    Kokkos::deep_copy(x, h);
  }
  convert_precision(space, y, x);
  convert_precision(space, back, y);
  auto hy = Kokkos::create_mirror_view(y);
  auto hb = Kokkos::create_mirror_view(back);
  Kokkos::deep_copy(hy, y);
  Kokkos::deep_copy(hb, back);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    float const f = float_of_bits(bits[i]);
    std::uint16_t const want = bf16_bits_from_float(f);
    if (hy.data()[i].bits != want) FAIL("element " << i << " = " << hex(bits[i]) << ": kernel " << hex(hy.data()[i].bits) << ", host " << hex(want));
    std::uint32_t wb;
    std::memcpy(&wb, hb.data() + i, sizeof wb);
    if (wb != std::uint32_t(want) << 16) FAIL("element " << i << " widened to " << hex(wb));
  }
  Tensor2<bf16, Mem> wrong("wrong", rows, cols + 1);
  REQUIRE_THROWS_WITH(convert_precision(space, wrong, x), Contains("convert_precision") &&
                                                              Contains("[997, " + std::to_string(cols + 1) + "]"));
}

namespace {

// C = alpha op(A) op(B) + beta C0 in double from the bf16 values as stored, and the bound on an
// fp32 GEMM's error: k ulps of fp32 of the sum of |products| (any summation order), plus beta C0's.
struct GemmReference {
  std::vector<double> value, bound;
};

GemmReference reference_gemm(bool ta, bool tb, int m, int n, int k, double alpha, std::vector<float> const& a,
                             std::vector<float> const& b, double beta, std::vector<double> const& c0) {
  GemmReference r{std::vector<double>(std::size_t(m) * n), std::vector<double>(std::size_t(m) * n)};
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int l = 0; l < k; ++l) {
        double const x = ta ? a[std::size_t(l) * m + i] : a[std::size_t(i) * k + l];
        double const y = tb ? b[std::size_t(j) * k + l] : b[std::size_t(l) * n + j];
        s += x * y;
        mag += std::fabs(x * y);
      }
      std::size_t const e = std::size_t(i) * n + j;
      r.value[e] = alpha * s + beta * c0[e];
      r.bound[e] = (k + 2) * 1.2e-7 * (std::fabs(alpha) * mag + std::fabs(beta * c0[e])) + 1e-30;
    }
  return r;
}

template <class View>
std::vector<float> bf16_values(View const& v) {
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  std::vector<float> out(h.span());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_float(h.data()[i]);
  return out;
}

template <class View>
void fill_bf16(View const& v, Rng& rng) {
  auto h = Kokkos::create_mirror_view(v);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = bf16(dist(rng));
  Kokkos::deep_copy(v, h);
}

}  // namespace

TEMPLATE_TEST_CASE("bf16 GEMMs accumulate in fp32 and round a bf16 C once", "[bf16][gemm]", JOULE_TEST_OP_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space const space;
  Rng rng(11);
  int const m = 37, n = 53, k = 71;  // no multiple of any tile
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("op" << (ta ? "T" : "N") << "(A) op" << (tb ? "T" : "N") << "(B), " << bf16_gemm_path<Space>());
      Tensor2<bf16, Mem> a("a", ta ? k : m, ta ? m : k), b("b", tb ? n : k, tb ? k : n);
      fill_bf16(a, rng), fill_bf16(b, rng);
      auto const work = Bf16GemmWorkspace<Mem>::template for_space<Space>(a.span(), b.span(), std::size_t(m) * n, "test");
      auto const av = bf16_values(a), bv = bf16_values(b);
      char const* const op_a = ta ? "T" : "N";
      char const* const op_b = tb ? "T" : "N";

      // fp32 C, accumulating onto what it holds (beta = 1, a gradient across micro-batches)
      Tensor2<float, Mem> c("c", m, n);
      fill_uniform(c, rng);
      auto const c0 = to_vector(c);
      gemm_bf16(space, op_a, op_b, 0.75f, a, b, 1.0f, c, work);
      auto const ref = reference_gemm(ta, tb, m, n, k, 0.75, av, bv, 1.0, c0);
      auto const got = to_vector(c);
      for (std::size_t e = 0; e < got.size(); ++e)
        if (!(std::fabs(got[e] - ref.value[e]) <= ref.bound[e]))
          FAIL("fp32 C[" << e / n << ", " << e % n << "] = " << got[e] << ", reference " << ref.value[e]);

      // bf16 C overwritten (beta = 0: an activation): within half a bf16 ulp of the exact result,
      // plus the fp32 sum's error, which can move a value across a rounding boundary.
      Tensor2<bf16, Mem> y("y", m, n);
      gemm_bf16(space, op_a, op_b, 1.0f, a, b, 0.0f, y, work);
      auto const yref = reference_gemm(ta, tb, m, n, k, 1.0, av, bv, 0.0, std::vector<double>(got.size(), 0.0));
      auto const yv = bf16_values(y);
      for (std::size_t e = 0; e < yv.size(); ++e) {
        double const half_ulp = std::ldexp(1.0, std::ilogb(yref.value[e] == 0 ? 1e-30 : yref.value[e]) - 8);
        if (!(std::fabs(yv[e] - yref.value[e]) <= half_ulp + yref.bound[e]))
          FAIL("bf16 C[" << e / n << ", " << e % n << "] = " << yv[e] << ", reference " << yref.value[e]);
      }
    }
  Tensor2<bf16, Mem> a("a", m, k), b("b", k + 1, n);
  Tensor2<float, Mem> c("c", m, n);
  auto const work = Bf16GemmWorkspace<Mem>::template for_space<Space>(a.span(), b.span(), c.span(), "test");
  REQUIRE_THROWS_WITH(gemm_bf16(space, "N", "N", 1.0f, a, b, 0.0f, c, work),
                      Contains("gemm_bf16") && Contains("[37, 71]") && Contains("[72, 53]"));
}

// What cuBLASLt's heuristic is told of each operand's alignment (core/precision/cublaslt_gemm.cpp):
// the largest power of two up to 256 dividing the address, and for a strided batch the stride in
// bytes too (the alignment every matrix of the batch has). Pure arithmetic: checked on every build.
TEST_CASE("GEMM operands' alignment: the largest power of two up to 256 dividing address and batch stride", "[bf16]") {
  using detail::address_alignment;
  using detail::pointer_alignment;
  CHECK(address_alignment(0x1000) == 256);
  CHECK(address_alignment(0x10000) == 256);  // no more than 256
  CHECK(address_alignment(0) == 256);
  CHECK(address_alignment(0x1080) == 128);  // Kokkos' allocations
  CHECK(address_alignment(0x1040) == 64);
  CHECK(address_alignment(0x1008) == 8);
  CHECK(address_alignment(0x1002) == 2);  // a bf16 at an odd element
  CHECK(address_alignment(0x1001) == 1);
  // Strided batches: every matrix's address, base + i * stride
  CHECK(address_alignment(0x1000, 64) == 64);
  CHECK(address_alignment(0x1000, 512) == 256);
  CHECK(address_alignment(0x1000, 384) == 128);
  CHECK(address_alignment(0x1040, 256) == 64);  // the base is the less aligned
  CHECK(address_alignment(0x1000, 6) == 2);     // 3 bf16 apart
  CHECK(address_alignment(0x1000, 0) == 256);   // 0: no batch
  static_assert(address_alignment(0x1040, 0x100) == 64);
  alignas(256) static unsigned char buffer[512];
  CHECK(pointer_alignment(buffer) == 256);
  CHECK(pointer_alignment(buffer + 128) == 128);
  CHECK(pointer_alignment(buffer + 64) == 64);
  CHECK(pointer_alignment(buffer + 8) == 8);
  CHECK(pointer_alignment(buffer + 1) == 1);
  CHECK(pointer_alignment(buffer, 64) == 64);
  CHECK(pointer_alignment(buffer + 32, 96) == 32);
}

namespace {

template <class View>
std::vector<std::uint16_t> bits_of(View const& v) {
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  std::vector<std::uint16_t> out(h.span());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = h.data()[i].bits;
  return out;
}

// The bf16 operator's output must be the fp32 operator's on the widened inputs, rounded once:
// the same arithmetic, in the same order, then one rounding. Its scope: bitwise where the compiler
// keeps multiplies and adds apart. On a target with FMA (x86-64 -march with FMA, aarch64) a
// compiler allowed to contract them (GCC's default, -ffp-contract=fast) may fuse in one
// instantiation and not in the other: g++ 16 -O3 -march=native does in the LayerNorm backward
// (one element of 7,511 one ulp off), g++ 12 does not. There the check is one bf16 ulp at most,
// and at least 99% of the elements bitwise.
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA) || defined(__FP_FAST_FMAF)
constexpr bool kMayContract = true;
#else
constexpr bool kMayContract = false;
#endif

template <class Space, class Bf, class Fp>
void require_rounded_from(Space const& space, char const* what, Bf const& got, Fp const& fp32) {
  Bf want("want", fp32.extent(0), fp32.extent(1));
  convert_precision(space, want, fp32);
  auto const g = bits_of(got), w = bits_of(want);
  REQUIRE(g.size() == w.size());
  std::size_t differ = 0;
  for (std::size_t e = 0; e < g.size(); ++e) {
    if (g[e] == w[e]) continue;
    ++differ;
    // Neighbours in bf16's ordering: the same sign, the bit patterns one apart.
    bool const one_ulp = (g[e] ^ w[e]) < 0x8000 && (g[e] > w[e] ? g[e] - w[e] : w[e] - g[e]) == 1;
    if (!kMayContract || !one_ulp)
      FAIL(what << "[" << e / got.extent(1) << ", " << e % got.extent(1) << "] = " << hex(g[e])
                << ", the fp32 operator rounded: " << hex(w[e]));
  }
  if (differ) WARN(what << ": " << differ << " of " << g.size() << " elements one bf16 ulp from the fp32 operator "
                        << "rounded (a multiply-add contracted in one instantiation only)");
  REQUIRE(differ * 100 <= g.size());
}

// fp32 results of the bf16 operator (statistics, parameter gradients) against the fp32 operator's:
// bitwise, or, where a multiply-add may be contracted in one instantiation only (kMayContract),
// within 1e-5 relative (a contraction's rounding, carried through a row's sums).
// (The values widened to double, exactly.)
inline void require_fp32_from(char const* what, std::vector<double> const& got, std::vector<double> const& want) {
  REQUIRE(got.size() == want.size());
  std::size_t differ = 0;
  for (std::size_t e = 0; e < got.size(); ++e) {
    if (got[e] == want[e] || (std::isnan(got[e]) && std::isnan(want[e]))) continue;
    ++differ;
    if (!kMayContract || !(std::fabs(got[e] - want[e]) <= 1e-5 * std::max(1.0, std::fabs(want[e]))))
      FAIL(what << "[" << e << "] = " << got[e] << ", the fp32 operator's: " << want[e]);
  }
  if (differ) WARN(what << ": " << differ << " of " << got.size() << " elements differ from the fp32 operator's "
                        << "(a multiply-add contracted in one instantiation only)");
}

// Within half a bf16 ulp of a double reference (plus rel_extra, the fp32 computation's error).
void require_bf16_close(char const* what, std::vector<float> const& got, std::vector<double> const& ref,
                        double abs_extra) {
  REQUIRE(got.size() == ref.size());
  for (std::size_t e = 0; e < got.size(); ++e) {
    double const half_ulp = ref[e] == 0 ? 0 : std::ldexp(1.0, std::ilogb(ref[e]) - 8);
    if (!(std::fabs(got[e] - ref[e]) <= half_ulp * (1 + 1e-3) + abs_extra))
      FAIL(what << "[" << e << "] = " << got[e] << ", reference " << ref[e] << " (half ulp " << half_ulp << ")");
  }
}

}  // namespace

TEMPLATE_TEST_CASE("bf16 LayerNorm, GELU and residual are the fp32 operators rounded once", "[bf16][ops]",
                   JOULE_TEST_OP_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space const space;
  Rng rng(23);
  int const n = 37, c = 203;  // no multiple of a warp, a tile or a vector width
  Tensor2<bf16, Mem> x("x", n, c), dy("dy", n, c), skip("skip", n, c);
  Tensor1<bf16, Mem> w("w", c), b("b", c);  // the kernels' bf16 copies of the parameters
  fill_bf16(x, rng), fill_bf16(dy, rng), fill_bf16(skip, rng), fill_bf16(w, rng), fill_bf16(b, rng);
  Tensor2<float, Mem> xf("xf", n, c), dyf("dyf", n, c), skipf("skipf", n, c);
  Tensor1<float, Mem> wf("wf", c), bf("bf", c);
  convert_precision(space, xf, x), convert_precision(space, dyf, dy), convert_precision(space, skipf, skip);
  convert_precision(space, wf, w), convert_precision(space, bf, b);

  SECTION("LayerNorm forward and backward") {
    Tensor2<bf16, Mem> y("y", n, c), dx("dx", n, c);
    Tensor1<float, Mem> mean("mean", n), rstd("rstd", n), dw("dw", c), db("db", c);
    layernorm_forward(space, y, mean, rstd, x, w, b);
    layernorm_backward(space, dx, dw, db, dy, x, w, mean, rstd);
    Tensor2<float, Mem> yf("yf", n, c), dxf("dxf", n, c);
    Tensor1<float, Mem> meanf("meanf", n), rstdf("rstdf", n), dwf("dwf", c), dbf("dbf", c);
    layernorm_forward(space, yf, meanf, rstdf, xf, wf, bf);
    layernorm_backward(space, dxf, dwf, dbf, dyf, xf, wf, meanf, rstdf);
    require_rounded_from(space, "LayerNorm y", y, yf);
    require_rounded_from(space, "LayerNorm d_x", dx, dxf);
    // fp32 statistics and parameter gradients: exactly the fp32 operator's (the scope above)
    require_fp32_from("LayerNorm mean", to_vector(mean), to_vector(meanf));
    require_fp32_from("LayerNorm rstd", to_vector(rstd), to_vector(rstdf));
    require_fp32_from("LayerNorm d_w", to_vector(dw), to_vector(dwf));
    require_fp32_from("LayerNorm d_b", to_vector(db), to_vector(dbf));
    // and against a double reference of the forward: half a bf16 ulp plus fp32's error
    auto const xv = bf16_values(x), wv = bf16_values(w), bv = bf16_values(b);
    std::vector<double> ref(std::size_t(n) * c);
    for (int r = 0; r < n; ++r) {
      double m = 0, v = 0;
      for (int i = 0; i < c; ++i) m += xv[std::size_t(r) * c + i];
      m /= c;
      for (int i = 0; i < c; ++i) v += (xv[std::size_t(r) * c + i] - m) * (xv[std::size_t(r) * c + i] - m);
      double const rs = 1 / std::sqrt(v / c + 1e-5);
      for (int i = 0; i < c; ++i) ref[std::size_t(r) * c + i] = (xv[std::size_t(r) * c + i] - m) * rs * wv[i] + bv[i];
    }
    require_bf16_close("LayerNorm y", bf16_values(y), ref, 1e-5);
  }
  SECTION("GELU forward and backward") {
    Tensor2<bf16, Mem> y("y", n, c), dx("dx", n, c);
    Tensor2<float, Mem> yf("yf", n, c), dxf("dxf", n, c);
    gelu_forward(space, y, x), gelu_backward(space, dx, dy, x);
    gelu_forward(space, yf, xf), gelu_backward(space, dxf, dyf, xf);
    require_rounded_from(space, "GELU y", y, yf);
    require_rounded_from(space, "GELU d_x", dx, dxf);
    auto const xv = bf16_values(x);
    std::vector<double> ref(xv.size());
    for (std::size_t e = 0; e < xv.size(); ++e) {
      double const v = xv[e];
      ref[e] = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    }
    require_bf16_close("GELU y", bf16_values(y), ref, 1e-6);
  }
  SECTION("residual forward and backward") {
    Tensor2<bf16, Mem> y("y", n, c), acc("acc", n, c);
    Tensor2<float, Mem> yf("yf", n, c), accf("accf", n, c);
    residual_forward(space, y, x, skip), residual_forward(space, yf, xf, skipf);
    require_rounded_from(space, "residual y", y, yf);
    Kokkos::deep_copy(acc, x), Kokkos::deep_copy(accf, xf);
    residual_backward(space, acc, dy), residual_backward(space, accf, dyf);
    require_rounded_from(space, "residual d_x", acc, accf);
  }
}

namespace {

// Attention at head size 64 through one shape of kernels (Block: the GPU-shaped ones), bf16
// against the fp32 kernels on the same (widened) inputs.
template <bool Block, class Space>
void check_bf16_attention(Space const& space) {
  using Mem = typename Space::memory_space;
  Rng rng(Block ? 31 : 29);
  int const batch = 2, seq = 47, heads = 2, c = 128, n = batch * seq;  // head size 64, seq no tile multiple
  auto const mask = AttentionMask::prefix(13);
  auto const s = detail::attention_shape("attention_forward", n, 3 * c, batch, heads, mask);
  Tensor2<bf16, Mem> qkv("qkv", n, 3 * c), out("out", n, c), d_out("d_out", n, c), d_qkv("d_qkv", n, 3 * c);
  Tensor2<float, Mem> lse("lse", batch * heads, seq), delta("delta", batch * heads, seq);
  fill_bf16(qkv, rng), fill_bf16(d_out, rng);
  Tensor2<float, Mem> qkv_f("qkv_f", n, 3 * c), out_f("out_f", n, c), d_out_f("d_out_f", n, c),
      d_qkv_f("d_qkv_f", n, 3 * c), lse_f("lse_f", batch * heads, seq), delta_f("delta_f", batch * heads, seq);
  convert_precision(space, qkv_f, qkv), convert_precision(space, d_out_f, d_out);

  detail::launch_attention_forward<64, Block>(space, s, out, lse, qkv);
  detail::launch_attention_forward<64, Block>(space, s, out_f, lse_f, qkv_f);
  require_rounded_from(space, "attention out", out, out_f);
  REQUIRE(to_vector(lse) == to_vector(lse_f));  // fp32 log-sum-exp: the fp32 kernel's exactly

  // The backward reads the stored (bf16) output for delta: give the fp32 kernels the same values.
  Tensor2<float, Mem> out_widened("out_widened", n, c);
  convert_precision(space, out_widened, out);
  detail::launch_attention_backward<64, Block>(space, s, d_qkv, delta, d_out, qkv, out, lse);
  detail::launch_attention_backward<64, Block>(space, s, d_qkv_f, delta_f, d_out_f, qkv_f, out_widened, lse_f);
  REQUIRE(to_vector(delta) == to_vector(delta_f));
  require_rounded_from(space, "attention d_qkv", d_qkv, d_qkv_f);
}

}  // namespace

TEMPLATE_TEST_CASE("bf16 attention is the fp32 kernels rounded once (host and GPU-shaped kernels)", "[bf16][ops]",
                   JOULE_TEST_OP_SPACES) {
  TestType const space;
  SECTION("host kernels") { check_bf16_attention<false>(space); }
  SECTION("GPU-shaped block kernels") { check_bf16_attention<true>(space); }
}

TEMPLATE_TEST_CASE("bf16 linear layers are the fp32 layer rounded once, with fp32 bias and gradients", "[bf16][ops]",
                   JOULE_TEST_OP_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space const space;
  Rng rng(41);
  int const n = 37, n_in = 53, n_out = 29;
  Tensor2<bf16, Mem> in("in", n, n_in), w("w", n_out, n_in), y("y", n, n_out), dy("dy", n, n_out), dx("dx", n, n_in);
  Tensor1<float, Mem> b("b", n_out), db("db", n_out), db_f("db_f", n_out);
  Tensor2<float, Mem> dw("dw", n_out, n_in), dw_f("dw_f", n_out, n_in);
  fill_bf16(in, rng), fill_bf16(w, rng), fill_bf16(dy, rng);
  fill_uniform(b, rng), fill_uniform(db, rng), fill_uniform(dw, rng);  // gradients accumulate onto these
  Kokkos::deep_copy(db_f, db), Kokkos::deep_copy(dw_f, dw);
  Tensor2<float, Mem> in_f("in_f", n, n_in), w_f("w_f", n_out, n_in), y_f("y_f", n, n_out), dy_f("dy_f", n, n_out),
      dx_f("dx_f", n, n_in);
  convert_precision(space, in_f, in), convert_precision(space, w_f, w), convert_precision(space, dy_f, dy);
  auto const need = linear_gemm_scratch(n, n_in, n_out);
  auto const gemm_work = Bf16GemmWorkspace<Mem>::template for_space<Space>(need.a, need.b, need.c, "test");
  ColumnSumWorkspace<float, Mem> const sums(column_sum_scratch(n, n_out), "test");

  linear_forward(space, y, in, w, b, gemm_work);
  linear_forward(space, y_f, in_f, w_f, b);
  require_rounded_from(space, "linear y", y, y_f);
  linear_backward(space, dx, dw, db, dy, in, w, sums, gemm_work);  // workspaces in either order
  linear_backward(space, dx_f, dw_f, db_f, dy_f, in_f, w_f, sums);
  require_rounded_from(space, "linear d_in", dx, dx_f);
  REQUIRE(to_vector(dw) == to_vector(dw_f));
  REQUIRE(to_vector(db) == to_vector(db_f));
  Tensor2<bf16, Mem> y_no_bias("y_no_bias", n, n_out);
  Tensor2<float, Mem> y_no_bias_f("y_no_bias_f", n, n_out);
  linear_forward(space, y_no_bias, in, w, Tensor1<float, Mem>(), gemm_work);
  linear_forward(space, y_no_bias_f, in_f, w_f, Tensor1<float, Mem>());
  require_rounded_from(space, "linear y without bias", y_no_bias, y_no_bias_f);
}

TEMPLATE_TEST_CASE("bf16 logits: cross-entropy in fp32, the gradient rounded once", "[bf16][ops]", JOULE_TEST_OP_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space const space;
  Rng rng(43);
  int const n = 37, vocab = 259;  // the byte vocabulary: no multiple of a warp
  Tensor2<bf16, Mem> logits("logits", n, vocab), d_logits("d_logits", n, vocab);
  fill_bf16(logits, rng);
  Tensor2<float, Mem> logits_f("logits_f", n, vocab), d_logits_f("d_logits_f", n, vocab);
  convert_precision(space, logits_f, logits);
  Kokkos::View<int*, Mem> targets("targets", n);
  {
    auto h = Kokkos::create_mirror_view(targets);
    std::uniform_int_distribution<int> pick(0, vocab - 1);
    for (int r = 0; r < n; ++r) h(r) = r % 5 == 0 ? kIgnoreIndex : pick(rng);  // some rows ignored
    Kokkos::deep_copy(targets, h);
  }
  Tensor1<float, Mem> lse("lse", n), losses("losses", n), lse_f("lse_f", n), losses_f("losses_f", n);
  auto const got = cross_entropy_forward(space, lse, losses, logits, targets);
  auto const want = cross_entropy_forward(space, lse_f, losses_f, logits_f, targets);
  REQUIRE(got.loss == want.loss);  // the fp32 loss of the same (bf16) logits, bit for bit
  REQUIRE(got.counted_rows == want.counted_rows);
  REQUIRE(to_vector(lse) == to_vector(lse_f));
  cross_entropy_backward(space, d_logits, logits, lse, targets, got.counted_rows);
  cross_entropy_backward(space, d_logits_f, logits_f, lse_f, targets, want.counted_rows);
  require_rounded_from(space, "cross-entropy d_logits", d_logits, d_logits_f);
}

TEMPLATE_TEST_CASE("bf16 embeddings: fp32 tables, bf16 activations, fp32 gradient sums", "[bf16][ops]", JOULE_TEST_OP_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space const space;
  Rng rng(47);
  int const batch = 3, seq = 23, n = batch * seq, c = 72, vocab = 37;
  Tensor2<float, Mem> wte("wte", vocab, c), wpe("wpe", seq, c);
  fill_uniform(wte, rng), fill_uniform(wpe, rng);
  Kokkos::View<int*, Mem> tokens("tokens", n);
  {
    auto h = Kokkos::create_mirror_view(tokens);
    std::uniform_int_distribution<int> pick(0, vocab - 1);
    for (int r = 0; r < n; ++r) h(r) = r % 3 == 0 ? 0 : pick(rng);  // a large bucket, as PAD makes
    Kokkos::deep_copy(tokens, h);
  }
  Tensor2<bf16, Mem> x("x", n, c), dy("dy", n, c);
  Tensor2<float, Mem> x_f("x_f", n, c), dy_f("dy_f", n, c);
  embedding_forward(space, x, tokens, wte, wpe, seq);
  embedding_forward(space, x_f, tokens, wte, wpe, seq);
  require_rounded_from(space, "embedding x", x, x_f);
  fill_bf16(dy, rng);
  convert_precision(space, dy_f, dy);
  Tensor2<float, Mem> dwte("dwte", vocab, c), dwpe("dwpe", seq, c), dwte_f("dwte_f", vocab, c), dwpe_f("dwpe_f", seq, c);
  embedding_backward(space, dwte, dwpe, dy, tokens, seq);
  embedding_backward(space, dwte_f, dwpe_f, dy_f, tokens, seq);
  REQUIRE(to_vector(dwte) == to_vector(dwte_f));
  REQUIRE(to_vector(dwpe) == to_vector(dwpe_f));
}

namespace {

std::vector<double> doubles(std::vector<float> const& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace

TEMPLATE_TEST_CASE("bf16 attention on tensor cores (batched GEMMs around an fp32 softmax) against the definition and "
                   "no further from it than the fused kernel",
                   "[bf16][ops][attention]", JOULE_TEST_OP_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space const space;
  Rng rng(53);
  struct Case {
    int batch, seq, heads, hd;
    AttentionMask mask;
  };
  // Sequences no multiple of the scores' 8-column padding or of any tile; every mask; three head sizes.
  for (Case const& k : {Case{2, 13, 3, 16, AttentionMask::causal()}, Case{2, 47, 2, 64, AttentionMask::prefix(13)},
                        Case{1, 40, 2, 32, AttentionMask::none()}, Case{3, 9, 1, 128, AttentionMask::prefix(20)}}) {
    int const c = k.heads * k.hd, n = k.batch * k.seq;
    INFO("batch " << k.batch << ", seq " << k.seq << ", heads " << k.heads << ", head size " << k.hd << ", mask "
                  << k.mask.name() << ", GEMMs: " << bf16_gemm_path<Space>());
    Tensor2<bf16, Mem> qkv("qkv", n, 3 * c), d_out("d_out", n, c);
    fill_bf16(qkv, rng), fill_bf16(d_out, rng);
    auto const work = AttentionGemmWorkspace<Mem>::template for_space<Space>(k.batch * k.heads, k.seq, k.hd, "test");
    auto const run = [&](bool gemm) {
      Tensor2<bf16, Mem> out("out", n, c), d_qkv("d_qkv", n, 3 * c);
      Tensor2<float, Mem> lse("lse", k.batch * k.heads, k.seq), delta("delta", k.batch * k.heads, k.seq);
      Kokkos::deep_copy(d_qkv, bf16(7.0f));  // overwritten, not accumulated
      if (gemm) {
        attention_forward_gemm(space, out, lse, qkv, k.batch, k.heads, k.mask, work);
        attention_backward_gemm(space, d_qkv, delta, d_out, qkv, out, lse, k.batch, k.heads, k.mask, work);
      } else {
        attention_forward(space, out, lse, qkv, k.batch, k.heads, k.mask);
        attention_backward(space, d_qkv, delta, d_out, qkv, out, lse, k.batch, k.heads, k.mask);
      }
      return std::tuple{bf16_values(out), to_vector(lse), bf16_values(d_qkv)};
    };
    auto const [out, lse, d_qkv] = run(true);
    auto const [fused_out, fused_lse, fused_d_qkv] = run(false);
    auto const ref = naive_attention(doubles(bf16_values(qkv)), doubles(bf16_values(d_out)), k.batch, k.seq, k.heads,
                                     k.hd, k.mask.open_prefix(k.seq));
    double worst_lse = 0;
    for (std::size_t i = 0; i < ref.lse.size(); ++i) worst_lse = std::max(worst_lse, std::fabs(lse[i] - ref.lse[i]));
    double const e_out = relative_l2(out, ref.out), e_grad = relative_l2(d_qkv, ref.d_qkv);
    double const f_out = relative_l2(fused_out, ref.out), f_grad = relative_l2(fused_d_qkv, ref.d_qkv);
    UNSCOPED_INFO("relative L2 from the definition: out " << e_out << " (fused " << f_out << "), d_qkv " << e_grad
                                                          << " (fused " << f_grad << "); lse within " << worst_lse);
    CHECK(worst_lse < 2e-5);  // fp32 scores of the bf16 inputs: lse is fp32 arithmetic only
    CHECK(e_out < 5e-3);      // p rounded to bf16 once (2^-9), o rounded once
    CHECK(e_grad < 8e-3);     // ds from the bf16 p, rounded to bf16 before its two GEMMs
    CHECK(e_out < 2.5 * f_out + 1e-3);
    CHECK(e_grad < 2.5 * f_grad + 2e-3);
  }
  auto const work = AttentionGemmWorkspace<Mem>::template for_space<Space>(4, 13, 16, "test");
  Tensor2<bf16, Mem> qkv("qkv", 2 * 14, 3 * 32), out("out", 2 * 14, 32);
  Tensor2<float, Mem> lse("lse", 4, 14);
  REQUIRE_THROWS_WITH(attention_forward_gemm(space, out, lse, qkv, 2, 2, AttentionMask::causal(), work),
                      Contains("attention_forward_gemm") && Contains("4 heads of 13 tokens") &&
                          Contains("4 of 14"));
}
