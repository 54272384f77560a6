#pragma once
// Shared helpers for joule's tests: the execution spaces to test, random views, copies to the
// host, and a central finite-difference gradient checker.
#include "core/tensor.hpp"

#include "support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

// Every operator test runs once per enabled backend.
#if defined(KOKKOS_ENABLE_CUDA)
#define JOULE_TEST_DEVICE_SPACE , Kokkos::Cuda
#else
#define JOULE_TEST_DEVICE_SPACE
#endif
#if defined(KOKKOS_ENABLE_OPENMP) && defined(KOKKOS_ENABLE_SERIAL)
#define JOULE_TEST_SPACES Kokkos::Serial, Kokkos::OpenMP JOULE_TEST_DEVICE_SPACE
#elif defined(KOKKOS_ENABLE_OPENMP)
#define JOULE_TEST_SPACES Kokkos::OpenMP JOULE_TEST_DEVICE_SPACE
#else
#define JOULE_TEST_SPACES Kokkos::DefaultHostExecutionSpace JOULE_TEST_DEVICE_SPACE
#endif

namespace joule::test {

using Rng = std::mt19937_64;

// Fills any contiguous view with uniform values in [lo, hi) (through a host mirror).
template <class View>
void fill_uniform(View const& v, Rng& rng, double lo = -1.0, double hi = 1.0) {
  auto h = Kokkos::create_mirror_view(v);
  std::uniform_real_distribution<double> dist(lo, hi);
  auto* p = h.data();
  for (std::size_t i = 0; i < h.span(); ++i) p[i] = static_cast<typename View::value_type>(dist(rng));
  Kokkos::deep_copy(v, h);
}

// ||a - ref|| / ||ref|| (2-norms, summed in double; 0 / 0 counts as 0).
template <class A, class B>
double relative_l2(std::vector<A> const& a, std::vector<B> const& ref) {
  REQUIRE(a.size() == ref.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double const d = double(a[i]) - double(ref[i]);
    num += d * d, den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

template <class View>
std::vector<double> to_vector(View const& v) {
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  return std::vector<double>(h.data(), h.data() + h.span());
}

template <class View>
void from_vector(View const& v, std::vector<double> const& values) {
  auto h = Kokkos::create_mirror_view(v);
  REQUIRE(values.size() == h.span());
  for (std::size_t i = 0; i < values.size(); ++i) h.data()[i] = values[i];
  Kokkos::deep_copy(v, h);
}

// Sets one element of a 1-D view (for planting a bad value in otherwise valid input).
template <class View>
void set_element(View const& v, std::size_t i, typename View::non_const_value_type value) {
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  h(i) = value;
  Kokkos::deep_copy(v, h);
}

// sum_i a[i] * b[i]: the scalar loss L = <out, R> whose gradient w.r.t. out is R.
inline double dot(std::vector<double> const& a, std::vector<double> const& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

struct Mismatch {
  double worst_excess = 0;  // max over elements of |a - b| - tolerance(a, b); <= 0 means all match
  std::size_t worst_index = 0;
  double a = 0, b = 0;
  std::size_t checked = 0;
  bool ok() const { return worst_excess <= 0; }
};

inline Mismatch compare(std::vector<double> const& a, std::vector<double> const& b, double rtol,
                        double atol) {
  REQUIRE(a.size() == b.size());
  Mismatch m;
  m.worst_excess = -1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double const excess = std::abs(a[i] - b[i]) - (atol + rtol * std::max(std::abs(a[i]), std::abs(b[i])));
    if (excess > m.worst_excess || std::isnan(a[i]) || std::isnan(b[i])) {
      m.worst_excess = std::isnan(excess) ? 1e300 : excess;
      m.worst_index = i;
      m.a = a[i];
      m.b = b[i];
    }
  }
  m.checked = a.size();
  return m;
}

#define JOULE_REQUIRE_CLOSE(what, actual, expected, rtol, atol)                                \
  do {                                                                                         \
    auto const joule_m_ = ::joule::test::compare((actual), (expected), (rtol), (atol));        \
    INFO(what << ": worst element " << joule_m_.worst_index << " of " << joule_m_.checked     \
              << ": " << joule_m_.a << " vs " << joule_m_.b);                                  \
    REQUIRE(joule_m_.ok());                                                                    \
  } while (0)

// Central finite differences of loss() w.r.t. the elements of `x` (a device view), compared with
// `analytic` (its gradient as computed by a backward pass). Checks every element if there are at
// most max_checks, else a random sample that always includes the first and last element.
template <class View>
Mismatch finite_difference_check(View const& x, std::vector<double> const& analytic,
                                 std::function<double()> const& loss, Rng& rng,
                                 int max_checks = 200, double h = 1e-6, double rtol = 1e-5,
                                 double atol = 1e-7) {
  auto host = Kokkos::create_mirror_view(x);
  Kokkos::deep_copy(host, x);
  std::size_t const n = host.span();
  REQUIRE(analytic.size() == n);
  std::vector<std::size_t> idx;
  if (n <= std::size_t(max_checks)) {
    for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    idx = {0, n - 1};
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    while (idx.size() < std::size_t(max_checks)) idx.push_back(pick(rng));
  }
  std::vector<double> a, numeric;
  for (auto i : idx) {
    auto const original = host.data()[i];
    host.data()[i] = original + h;
    Kokkos::deep_copy(x, host);
    double const plus = loss();
    host.data()[i] = original - h;
    Kokkos::deep_copy(x, host);
    double const minus = loss();
    host.data()[i] = original;
    Kokkos::deep_copy(x, host);
    numeric.push_back((plus - minus) / (2 * h));
    a.push_back(analytic[i]);
  }
  auto m = compare(a, numeric, rtol, atol);
  m.worst_index = idx[m.worst_index];
  return m;
}

#define JOULE_REQUIRE_GRADIENT(what, view, analytic, loss, rng)                                \
  do {                                                                                         \
    auto const joule_g_ = ::joule::test::finite_difference_check((view), (analytic), (loss), (rng)); \
    INFO(what << ": element " << joule_g_.worst_index << ": analytic " << joule_g_.a            \
              << " vs finite difference " << joule_g_.b << " (" << joule_g_.checked            \
              << " checked)");                                                                 \
    REQUIRE(joule_g_.ok());                                                                    \
  } while (0)

}  // namespace joule::test
