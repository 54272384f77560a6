// The direct BLAS GEMM (core/detail/blas_gemm.hpp, joule's path where Kokkos-Kernels is absent):
// bitwise equal to Kokkos-Kernels' gemm on the same host BLAS where this build has both, and
// against a naive product everywhere; on random data, at awkward sizes, all four transposes.
#include "core/compat_kernels.hpp"
#include "core/detail/blas_gemm.hpp"
#include "core/tensor.hpp"
#include "support/test_support.hpp"

#include <cmath>
#include <cstring>
#include <limits>

using namespace joule;
using namespace joule::test;

namespace {

using HostSpace = Kokkos::DefaultHostExecutionSpace;
using HostMem = HostSpace::memory_space;

struct GemmCase {
  int m, n, k;
};
// Awkward sizes: 1s, primes, just past a power of two, a deep k (the GEMM kernels' edge tiles).
constexpr GemmCase kCases[] = {{1, 2, 1}, {2, 1, 3}, {7, 13, 5}, {33, 17, 64}, {65, 129, 31}, {130, 70, 257}, {5, 3, 1000}};

template <class T>
struct Operands {
  Tensor2<T, HostMem> a, b, c0;
  Operands(GemmCase g, bool ta, bool tb, Rng& rng)
      : a("a", ta ? g.k : g.m, ta ? g.m : g.k), b("b", tb ? g.n : g.k, tb ? g.k : g.n), c0("c0", g.m, g.n) {
    fill_uniform(a, rng);
    fill_uniform(b, rng);
    fill_uniform(c0, rng);
  }
  Tensor2<T, HostMem> c_copy() const {
    Tensor2<T, HostMem> c("c", c0.extent(0), c0.extent(1));
    Kokkos::deep_copy(c, c0);
    return c;
  }
};

template <class T>
bool bitwise_equal(Tensor2<T, HostMem> const& x, Tensor2<T, HostMem> const& y) {
  return std::memcmp(x.data(), y.data(), sizeof(T) * x.size()) == 0;
}

}  // namespace

TEMPLATE_TEST_CASE("direct BLAS gemm matches a naive product; beta = 0 ignores C, as BLAS", "[ops][gemm]", float,
                   double) {
  using T = TestType;
  HostSpace space;
  Rng rng(52);
  double const eps = std::numeric_limits<T>::epsilon();
  for (GemmCase const g : kCases)
    for (int t = 0; t < 4; ++t) {
      bool const ta = t & 1, tb = t & 2;
      for (T const beta : {T(0), T(1), T(-0.5)}) {
        T const alpha = T(0.75);
        Operands<T> const op(g, ta, tb, rng);
        auto const c = op.c_copy();
        if (beta == T(0)) Kokkos::deep_copy(c, std::numeric_limits<T>::quiet_NaN());  // never read
        detail::blas_gemm(space, ta ? "T" : "N", tb ? "T" : "N", alpha, op.a, op.b, beta, c);
        INFO("m " << g.m << " n " << g.n << " k " << g.k << " op" << (ta ? "T" : "N") << "(A) op" << (tb ? "T" : "N")
                  << "(B) beta " << beta);
        double worst = 0;
        int not_finite = 0;
        for (int i = 0; i < g.m; ++i)
          for (int j = 0; j < g.n; ++j) {
            double s = 0, scale = 0;
            for (int l = 0; l < g.k; ++l) {
              double const p = double(ta ? op.a(l, i) : op.a(i, l)) * double(tb ? op.b(j, l) : op.b(l, j));
              s += p;
              scale += std::abs(p);
            }
            double const want = alpha * s + (beta == T(0) ? 0.0 : double(beta) * double(op.c0(i, j)));
            double const bound = 4 * eps * (g.k + 2) * (std::abs(alpha) * scale + std::abs(double(beta) * op.c0(i, j)));
            not_finite += !std::isfinite(double(c(i, j)));
            worst = std::max(worst, std::abs(double(c(i, j)) - want) / bound);
          }
        REQUIRE(not_finite == 0);
        REQUIRE(worst <= 1.0);
      }
    }
}

TEST_CASE("direct BLAS gemm: operands that do not fit are refused, naming the shapes", "[ops][gemm]") {
  Tensor2<float, HostMem> a("a", 3, 4), b("b", 5, 2), c("c", 3, 2);
  REQUIRE_THROWS_WITH(detail::blas_gemm(HostSpace(), "N", "N", 1.0f, a, b, 0.0f, c),
                      "joule::gemm: opN(A) of [3, 4] times opN(B) of [5, 2] does not give C of [3, 2]");
  Tensor2<float, HostMem> b_ok("b", 4, 2);
  REQUIRE_NOTHROW(detail::blas_gemm(HostSpace(), "N", "N", 1.0f, a, b_ok, 0.0f, c));
}

#if !defined(JOULE_GEMM_DIRECT_BLAS) && defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
// Kokkos-Kernels' host path calls the same BLAS routine with the same swapped operands, so the
// two are bitwise equal. Not compared: NN products with one column, which Kokkos-Kernels 4.x hands
// to gemv (another BLAS call).
TEMPLATE_TEST_CASE("direct BLAS gemm is bitwise Kokkos-Kernels' gemm on the same host BLAS", "[ops][gemm]", float,
                   double) {
  using T = TestType;
  HostSpace space;
  Rng rng(5252);
  int compared = 0, differing = 0;
  for (GemmCase const g : kCases)
    for (int t = 0; t < 4; ++t) {
      bool const ta = t & 1, tb = t & 2;
      if (!ta && !tb && g.n == 1) continue;
      for (T const beta : {T(0), T(1), T(-0.5)}) {
        Operands<T> const op(g, ta, tb, rng);
        auto const direct = op.c_copy(), kernels = op.c_copy();
        char const* trans_a = ta ? "T" : "N";
        char const* trans_b = tb ? "T" : "N";
        detail::blas_gemm(space, trans_a, trans_b, T(0.75), op.a, op.b, beta, direct);
        compat::gemm(space, trans_a, trans_b, T(0.75), op.a, op.b, beta, kernels);
        bool const same = bitwise_equal(direct, kernels);
        if (!same)
          WARN("differs: m " << g.m << " n " << g.n << " k " << g.k << " op" << trans_a << "(A) op" << trans_b
                             << "(B) beta " << beta);
        ++compared;
        differing += !same;
      }
    }
  INFO(compared << " products compared, " << compared - differing << " bitwise equal");
  REQUIRE(compared >= 80);
  REQUIRE(differing == 0);
}
#endif
