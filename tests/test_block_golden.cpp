// A whole pre-LN transformer block, forward and backward, and one AdamW step, against golden
// values from PyTorch (tests/golden/make_block_golden.py, float64). The file holds three cases:
// prefix mask (B=2, S=13), causal (B=1, S=21, head size 32), no mask (B=3, S=7, three heads).
#include "core/model/block.hpp"
#include "core/ops/adamw.hpp"
#include "core/io/h5file.hpp"

#include <cstdlib>
#include "support/test_support.hpp"

using namespace joule;
using namespace joule::test;

namespace {

using GoldenFile = joule::io::H5File;

std::string golden_path() {
  char const* dir = std::getenv("JOULE_GOLDEN_DIR");  // else the source tree's tests/golden
  return std::string(dir ? dir : JOULE_TEST_GOLDEN_DIR) + "/block_golden.h5";
}

AttentionMask mask_of(GoldenFile const& f, std::string const& group) {
  auto const kind = f.attribute_string(group, "mask");
  if (kind == "none") return AttentionMask::none();
  if (kind == "causal") return AttentionMask::causal();
  return AttentionMask::prefix(int(f.attribute_int(group, "prefix")));
}

template <class T, class Space>
void check_case(Space const& space, GoldenFile const& f, std::string const& group, double rtol,
                double atol) {
  using Mem = typename Space::memory_space;
  BlockShape s;
  s.batch = f.attribute_int(group, "batch");
  s.seq = f.attribute_int(group, "seq");
  s.channels = f.attribute_int(group, "channels");
  s.heads = f.attribute_int(group, "heads");
  s.mlp_hidden = f.attribute_int(group, "mlp_hidden");
  s.mask = mask_of(f, group);
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
