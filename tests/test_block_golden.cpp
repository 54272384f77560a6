// A whole pre-LN transformer block, forward and backward, and one AdamW step, against golden
// values from PyTorch (tests/golden/make_block_golden.py, float64). The file holds three cases:
// prefix mask (B=2, S=13), causal (B=1, S=21, head size 32), no mask (B=3, S=7, three heads).
#include "core/model/block.hpp"
#include "core/ops/adamw.hpp"
#include "core/io/h5file.hpp"

#include <cmath>
#include <cstdlib>
#include <map>
#include <type_traits>
#include "support/test_support.hpp"
#include "support/test_paths.hpp"

using namespace joule;
using namespace joule::test;

namespace {

using GoldenFile = joule::io::H5File;

std::string golden_path() {
  char const* dir = std::getenv("JOULE_GOLDEN_DIR");  // else the source tree's tests/golden
  return (dir ? std::string(dir) : joule::test::source_path("tests/golden")) + "/block_golden.h5";
}

AttentionMask mask_of(GoldenFile const& f, std::string const& group) {
  auto const kind = f.attribute_string(group, "mask");
  if (kind == "none") return AttentionMask::none();
  if (kind == "causal") return AttentionMask::causal();
  return AttentionMask::prefix(int(f.attribute_int(group, "prefix")));
}

BlockShape shape_of_case(GoldenFile const& f, std::string const& group) {
  BlockShape s;
  s.batch = f.attribute_int(group, "batch");
  s.seq = f.attribute_int(group, "seq");
  s.channels = f.attribute_int(group, "channels");
  s.heads = f.attribute_int(group, "heads");
  s.mlp_hidden = f.attribute_int(group, "mlp_hidden");
  s.mask = mask_of(f, group);
  return s;
}

template <class T, class Space>
void check_case(Space const& space, GoldenFile const& f, std::string const& group, double rtol,
                double atol) {
  using Mem = typename Space::memory_space;
  BlockShape const s = shape_of_case(f, group);
  INFO("case " << group << " (" << s.mask.name() << "), " << (sizeof(T) == 4 ? "float" : "double"));

  BlockParameters<T, Mem> params("block.", s), grads("grad.", s);
  BlockActivations<T, Mem> acts(s);
  BlockWorkspace<T, Mem> work(s);
  params.for_each([&](std::string const& name, auto const& view) {
    joule::io::Dims dims;
    auto const values = f.read<double>(group + "/params/" + name, &dims);
    REQUIRE(dims.size() == unsigned(std::decay_t<decltype(view)>::rank));
    for (std::size_t r = 0; r < dims.size(); ++r) REQUIRE(dims[r] == view.extent(r));
    from_vector(view, values);
  });
  int const n = s.tokens(), c = s.channels;
  Tensor2<T, Mem> x("x", n, c), y("y", n, c), d_y("d_y", n, c), d_x("d_x", n, c);
  from_vector(x, f.read<double>(group + "/x"));
  from_vector(d_y, f.read<double>(group + "/dy"));

  block_forward(space, s, y, acts, params, x, work);
  JOULE_REQUIRE_CLOSE("block output y", to_vector(y), f.read<double>(group + "/y"), rtol, atol);

  block_backward(space, s, d_x, grads, work, d_y, x, acts, params);
  JOULE_REQUIRE_CLOSE("block d_x", to_vector(d_x), f.read<double>(group + "/dx"), rtol, atol);
  grads.for_each([&](std::string const& name, auto const& view) {
    JOULE_REQUIRE_CLOSE("gradient of " << name, to_vector(view), f.read<double>(group + "/grads/" + name),
                        rtol, atol);
  });

  // One AdamW step from zero moments on PyTorch's gradients.
  AdamWConfig cfg;
  cfg.lr = f.attribute_double("/", "adamw_lr");
  cfg.beta1 = f.attribute_double("/", "adamw_beta1");
  cfg.beta2 = f.attribute_double("/", "adamw_beta2");
  cfg.eps = f.attribute_double("/", "adamw_eps");
  cfg.weight_decay = f.attribute_double("/", "adamw_weight_decay");
  params.for_each([&](std::string const& name, auto const& view) {
    auto const g = f.read<double>(group + "/grads/" + name);
    Tensor1<T, Mem> p("p", g.size()), grad("g", g.size()), m("m", g.size()), v("v", g.size());
    from_vector(p, f.read<double>(group + "/params/" + name));
    from_vector(grad, g);
    adamw_update(space, p, grad, m, v, cfg, 1);
    JOULE_REQUIRE_CLOSE("AdamW step of " << name, to_vector(p),
                        f.read<double>(group + "/adamw_step1/" + name), rtol, atol);
    (void)view;
  });
}

}  // namespace

TEMPLATE_TEST_CASE("block: forward, backward and AdamW step equal PyTorch's golden values",
                   "[model][block][golden]", JOULE_TEST_SPACES) {
  TestType space;
  GoldenFile const f(golden_path(), GoldenFile::Mode::read);
  for (std::string const group : {"prefix", "causal", "none"}) {
    check_case<double>(space, f, group, 1e-9, 1e-11);
    // float32: the same computation within single-precision error.
    check_case<float>(space, f, group, 2e-3, 2e-4);
  }
}

namespace {

template <class View>
void from_vector_bf16(View const& v, std::vector<double> const& values) {
  auto h = Kokkos::create_mirror_view(v);
  REQUIRE(values.size() == h.span());
  for (std::size_t i = 0; i < values.size(); ++i) h.data()[i] = bf16(float(values[i]));
  Kokkos::deep_copy(v, h);
}

template <class View>
std::vector<double> to_vector_any(View const& v) {
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  std::vector<double> out(h.span());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = double(widen(h.data()[i]));
  return out;
}

// The bf16 block (kernel weights rounded from PyTorch's, fp32 gradients) with one attention path:
// each output's relative L2 distance from the float64 golden values, by name.
template <class Space>
std::map<std::string, double> bf16_block_errors(Space const& space, GoldenFile const& f, std::string const& group,
                                                AttentionPath path) {
  using Mem = typename Space::memory_space;
  BlockShape const s = shape_of_case(f, group);
  BlockParameters<bf16, Mem> params("block.", s);
  BlockParameters<float, Mem> grads("grad.", s);
  BlockActivations<bf16, Mem> acts(s);
  static_assert(std::is_same_v<Space, Kokkos::DefaultExecutionSpace>, "the workspace is made for the default space");
  BlockWorkspace<bf16, Mem> const work(s, "block", {}, path);
  params.for_each([&](std::string const& name, auto const& view) { from_vector_bf16(view, f.read<double>(group + "/params/" + name)); });
  int const n = s.tokens(), c = s.channels;
  Tensor2<bf16, Mem> x("x", n, c), y("y", n, c), d_y("d_y", n, c), d_x("d_x", n, c);
  from_vector_bf16(x, f.read<double>(group + "/x"));
  from_vector_bf16(d_y, f.read<double>(group + "/dy"));
  block_forward(space, s, y, acts, params, x, work);
  block_backward(space, s, d_x, grads, work, d_y, x, acts, params);
  std::map<std::string, double> e;
  e["y"] = relative_l2(to_vector_any(y), f.read<double>(group + "/y"));
  e["d_x"] = relative_l2(to_vector_any(d_x), f.read<double>(group + "/dx"));
  grads.for_each([&](std::string const& name, auto const& view) {
    e["gradient of " + name] = relative_l2(to_vector(view), f.read<double>(group + "/grads/" + name));
  });
  return e;
}

}  // namespace

TEST_CASE("block in bf16 with the tensor-core attention path: within bf16 error of PyTorch's float64 block, and as "
          "close as with the fused kernel",
          "[model][block][golden][bf16]") {
  Kokkos::DefaultExecutionSpace space;
  GoldenFile const f(golden_path(), GoldenFile::Mode::read);
  for (std::string const group : {"prefix", "causal", "none"}) {
    auto const gemm = bf16_block_errors(space, f, group, AttentionPath::gemm);
    auto const fused = bf16_block_errors(space, f, group, AttentionPath::fused);
    for (auto const& [name, err] : gemm) {
      INFO("case " << group << ", " << name << ": relative L2 from float64 " << err << " (fused kernel "
                   << fused.at(name) << ")");
      CHECK(err < 3e-2);  // bf16 weights and activations (2^-9 each), fp32 sums
      CHECK(err < 1.5 * fused.at(name) + 2e-3);
    }
  }
}
