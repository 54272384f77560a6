// The whole model: recompute depth changes no gradient bit, the gradient agrees with a
// directional finite difference per parameter group, the memory model matches what is
// actually allocated (Kokkos' allocation callbacks) for every recompute depth, and greedy
// captioning agrees with a plain host-side decoder and with the one-pass exact-caption check.
#include "core/data/synth.hpp"
#include "core/io/h5file.hpp"
#include "core/model/model.hpp"
#include "core/train/captioning.hpp"
#include "support/test_support.hpp"
#include "support/tiny_config.hpp"
#include "support/test_paths.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

using namespace joule;
using namespace joule::test;

namespace {

Config tiny_config() { return parse_config(tiny_config_json("unused.h5").dump(), "test config"); }

HostBatch synthetic_batch(ModelConfig const& m, int batch, std::uint64_t seed) {
  auto d = make_synthetic(SynthOptions::for_model(m, batch, seed));
  HostBatch b;
  b.images = d.images;
  b.tokens = d.tokens;
  for (int i = 0; i < batch; ++i) b.samples.push_back(i);
  return b;
}

std::vector<float> all_gradients(Model const& model) {
  std::vector<float> out;
  model.grads.for_each_group([&](std::string const&, auto const& g) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g);
    out.insert(out.end(), h.data(), h.data() + h.span());
  });
  return out;
}

}  // namespace

TEST_CASE("model: gradients with every recompute depth equal those without, bit for bit",
          "[model][recompute]") {
  auto const cfg = tiny_config();
  int const batch = 3;
  auto const host = synthetic_batch(cfg.model, batch, 11);
  ExecSpace space;
  std::vector<float> reference;
  double reference_loss = 0;
  Precision const precision = GENERATE(Precision::fp32, Precision::bf16);
  INFO("precision " << precision_name(precision));
  for (int k = 0; k <= cfg.model.layers; ++k) {
    Model model(cfg.model, batch, k, {}, precision);
    model.init_parameters(5);
    model.zero_gradients(space);
    model.set_batch(space, host, batch);
    double const loss = model.forward(space).loss;
    model.backward(space, 1.0);
    space.fence();
    auto const g = all_gradients(model);
    INFO("recompute depth " << k);
    if (k == 0) {
      reference = g;
      reference_loss = loss;
      REQUIRE(loss > 4.0);  // ~ln(259) at initialisation: the loss is real, not zero
      continue;
    }
    REQUIRE(loss == reference_loss);
    REQUIRE(g.size() == reference.size());
    REQUIRE(std::memcmp(g.data(), reference.data(), g.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("model: a loss left on the device is the loss read at once; tokens outside the vocabulary are "
          "refused when the batch is staged", "[model]") {
  auto const cfg = tiny_config();
  int const batch = 3;
  auto host = synthetic_batch(cfg.model, batch, 12);
  ExecSpace space;
  Model model(cfg.model, batch, 0);
  model.init_parameters(7);
  model.set_batch(space, host, batch - 1);  // the last sample's targets ignored: fewer counted rows
  auto const read = model.forward(space);
  Model::LossSlot slot{Kokkos::View<double*, DeviceMemory>("sums", 3), 1};
  auto const deferred = model.forward(space, {}, slot);
  REQUIRE(std::isnan(deferred.loss));
  REQUIRE(deferred.counted_rows == read.counted_rows);
  REQUIRE(read.counted_rows > 0);
  auto const sums = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), slot.sums);
  REQUIRE(sums(1) / deferred.counted_rows == read.loss);  // the same sum, bit for bit
  host.tokens[5] = cfg.model.vocab();
  REQUIRE_THROWS_WITH(model.set_batch(space, host, batch),
                      Contains("Model::set_batch: 1 token(s) outside the vocabulary") && Contains("position 5"));
}

TEST_CASE("model: gradient agrees with a directional finite difference in every parameter group",
          "[model][gradcheck]") {
  auto const cfg = tiny_config();
  int const batch = 2;
  auto const host = synthetic_batch(cfg.model, batch, 12);
  ExecSpace space;
  Model model(cfg.model, batch, 1);
  model.init_parameters(6);
  model.set_batch(space, host, batch);
  model.zero_gradients(space);
  model.forward(space);
  model.backward(space, 1.0);
  space.fence();
  Rng rng(13);
  // Group by group: d = random direction, compare g.d with (L(p + e d) - L(p - e d)) / 2e.
  std::vector<std::string> names;
  model.params.for_each_group([&](std::string const& name, auto const&) { names.push_back(name); });
  for (auto const& group : names) {
    Tensor1<float, DeviceMemory> p, g;
    model.params.for_each_group([&](std::string const& n, auto const& s) { if (n == group) p = s; });
    model.grads.for_each_group([&](std::string const& n, auto const& s) { if (n == group) g = s; });
    auto const p0 = to_vector(p), gv = to_vector(g);
    std::vector<double> d(p0.size());
    double norm = 0;
    for (auto& x : d) {
      x = std::uniform_real_distribution<double>(-1, 1)(rng);
      norm += x * x;
    }
    for (auto& x : d) x /= std::sqrt(norm);
    double const analytic = dot(gv, d), eps = 2e-3;
    auto loss_at = [&](double t) {
      std::vector<double> q(p0);
      for (std::size_t i = 0; i < q.size(); ++i) q[i] += t * d[i];
      from_vector(p, q);
      return model.forward(space).loss;
    };
    double const numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    from_vector(p, p0);
    INFO("group " << group << ": g.d = " << analytic << ", finite difference " << numeric);
    REQUIRE(std::abs(analytic) > 1e-4);  // the direction actually moves the loss
    REQUIRE(std::abs(analytic - numeric) <= 0.02 * std::abs(analytic) + 2e-4);
  }
}

namespace {
std::map<std::string, std::size_t>* g_allocated = nullptr;
void count_allocation(Kokkos::Profiling::SpaceHandle space, char const* name, void const*, std::uint64_t size) {
  // The model's device memory only (on a GPU build its host staging buffers are not part of it).
  if (!g_allocated || std::string(space.name) != DeviceMemory::name()) return;
  std::string const n(name);
  for (char const* category : {"joule::param.", "joule::grad.", "joule::act.", "joule::work."})
    if (n.rfind(category, 0) == 0) (*g_allocated)[category] += size;
  if (n.rfind("joule::weight_bf16.", 0) == 0) (*g_allocated)["joule::param."] += size;  // the kernels' copy
}
}  // namespace

TEST_CASE("model: the memory model predicts the bytes allocated, for every recompute depth",
          "[model][memory]") {
  auto const cfg = tiny_config();
  int const batch = 5;
  std::size_t previous_activations = 0;
  Precision const precision = GENERATE(Precision::fp32, Precision::bf16);
  for (int k = 0; k <= cfg.model.layers; ++k) {
    std::map<std::string, std::size_t> measured;
    g_allocated = &measured;
    Kokkos::Tools::Experimental::set_allocate_data_callback(count_allocation);
    { Model model(cfg.model, batch, k, {}, precision); }
    Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
    g_allocated = nullptr;
    auto const e = estimate_memory(cfg.model, batch, k, 1, precision);
    INFO("precision " << precision_name(precision) << ", recompute depth " << k);
    auto within = [](std::size_t predicted, std::size_t actual) {
      return std::abs(double(predicted) - double(actual)) <= 0.10 * double(actual);
    };
    CHECK(within(e.parameters, measured["joule::param."]));
    CHECK(within(e.gradients, measured["joule::grad."]));
    CHECK(within(e.activations, measured["joule::act."]));
    CHECK(within(e.workspace, measured["joule::work."]));
    REQUIRE(measured["joule::act."] > 0);
    // Each recomputed block beyond the first frees one block's activations.
    if (k >= 2) REQUIRE(measured["joule::act."] < previous_activations);
    previous_activations = measured["joule::act."];
  }
}

namespace {
// Greedy decoding the plain way: the whole batch set again for every position, every logit brought
// to the host, the argmax taken there.
std::vector<std::int32_t> host_greedy(ExecSpace const& space, Model& model, HostBatch batch) {
  int const B = model.batch(), T = model.config().text_len, V = model.config().vocab(),
            n_img = model.config().image_tokens();
  std::fill(batch.tokens.begin(), batch.tokens.end(), kTokenPad);
  std::vector<bool> done(B, false);
  for (int b = 0; b < B; ++b) batch.tokens[b * T] = kTokenBos;
  for (int j = 0; j + 1 < T; ++j) {
    model.set_batch(space, batch, 0);
    model.forward(space);
    auto const logits = model.logits_to_host(space);
    for (int b = 0; b < B; ++b) {
      if (done[b]) continue;
      int const row = model.logits_row(b, n_img + j);
      int best = 0;
      for (int v = 1; v < V; ++v)
        if (logits(row, v) > logits(row, best)) best = v;
      batch.tokens[b * T + j + 1] = best;
      done[b] = best == kTokenEos || best == kTokenPad;
    }
  }
  return batch.tokens;
}
}  // namespace

TEST_CASE("model: greedy captions match a host decoder, and caption_misses is 0 exactly for them",
          "[model][captioning]") {
  auto const cfg = tiny_config();
  int const batch = 3, T = cfg.model.text_len;
  auto const images = synthetic_batch(cfg.model, batch, 23);
  ExecSpace space;
  Model model(cfg.model, batch, 1);
  model.init_parameters(GENERATE(3, 8));
  std::vector<std::int32_t> tokens;
  std::vector<char> done;
  greedy_captions(space, model, images, tokens, done);
  REQUIRE(tokens == host_greedy(space, model, images));

  // The greedy captions as references: teacher forcing finds no position where they differ.
  HostBatch reference = images;
  reference.tokens = tokens;
  model.set_batch(space, reference, batch);
  REQUIRE(model.forward(space).counted_rows >= 2 * batch);  // the captions have text to check
  auto const& misses = model.caption_misses(space);
  for (int b = 0; b < batch; ++b) CHECK(misses(b) == 0);

  // One changed token in sample 1's reference: a miss there, none elsewhere.
  std::int32_t& changed = reference.tokens[1 * T + 2];
  changed = changed == 'q' ? 'z' : 'q';
  model.set_batch(space, reference, batch);
  model.forward(space);
  auto const& after = model.caption_misses(space);
  CHECK(after(0) == 0);
  CHECK(after(1) >= 1);
  CHECK(after(2) == 0);
  // Samples past n_valid have no targets, so no misses.
  model.set_batch(space, reference, 1);
  model.forward(space);
  CHECK(model.caption_misses(space)(1) == 0);
}


// The bf16 model is the fp32 model with each operator's output rounded to bf16 (and its weights
// rounded once): on the same fp32 master weights its loss, logits and gradients follow fp32's to
// within what 8 bits of mantissa allow, and what it stores really is bf16.
TEST_CASE("model: bf16 forward and backward follow fp32 on the same weights, within bf16's precision",
          "[model][bf16]") {
  auto const cfg = tiny_config();
  int const batch = 3;
  auto const host = synthetic_batch(cfg.model, batch, 17);
  ExecSpace space;
  auto run = [&](Precision p, Model& model) {
    model.init_parameters(9);
    model.zero_gradients(space);
    model.set_batch(space, host, batch);
    double const loss = model.forward(space).loss;
    auto const logits = model.logits_to_host(space);
    model.backward(space, 1.0);
    space.fence();
    (void)p;
    return std::make_pair(loss, std::vector<float>(logits.data(), logits.data() + logits.span()));
  };
  Model fp32(cfg.model, batch, 0, {}, Precision::fp32), bf16m(cfg.model, batch, 0, {}, Precision::bf16);
  auto const [loss32, logits32] = run(Precision::fp32, fp32);
  auto const [loss16, logits16] = run(Precision::bf16, bf16m);
  INFO("loss fp32 " << loss32 << ", bf16 " << loss16);
  REQUIRE(loss32 > 4.0);
  // Tolerances: 2^-8 relative per rounding, a few dozen roundings deep, errors mostly averaging
  // (measured: loss 5e-6, logits 4e-3, gradients 3e-3 relative).
  REQUIRE(std::abs(loss16 - loss32) <= 1e-3 * loss32);
  REQUIRE(logits16 != logits32);  // it is not the fp32 model
  // Logits are fp32 (kHeldPrecision): most are no bf16 value.
  std::size_t not_bf16 = 0;
  for (float x : logits16) not_bf16 += float(bf16(x)) != x;
  REQUIRE(not_bf16 > logits16.size() / 2);
  CHECK(relative_l2(logits16, logits32) < 0.02);
  // Gradients group by group (fp32 sums of bf16 products): close to fp32's in norm and direction.
  std::vector<std::string> names;
  fp32.grads.for_each_group([&](std::string const& name, auto const&) { names.push_back(name); });
  for (int g = 0; g < fp32.grads.group_count(); ++g) {
    auto const a = to_vector(bf16m.grads.group_storage(g)), ref = to_vector(fp32.grads.group_storage(g));
    std::vector<float> af(a.begin(), a.end()), rf(ref.begin(), ref.end());
    double const err = relative_l2(af, rf);
    INFO("group " << names[std::size_t(g)] << ": relative L2 error of the bf16 gradient " << err);
    CHECK(err < 0.02);
    CHECK(err > 0);  // rounded somewhere
  }
  // The kernels' weights are the master weights rounded once.
  auto const master = to_vector(bf16m.params.group_storage(1));
  auto const copy_view = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bf16m.kernel_weights.group_storage(1));
  for (std::size_t i = 0; i < master.size(); ++i) REQUIRE(copy_view(i).bits == bf16(float(master[i])).bits);
}

namespace {
struct Fit {
  double relative_l2 = 0, worst = 0;  // ||a - b|| / ||b||, max |a - b| / max |b|
};
Fit compare(std::vector<float> const& a, std::vector<float> const& ref) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - ref[i])), scale = std::max(scale, std::abs(double(ref[i])));
  return {relative_l2(a, ref), worst / std::max(scale, 1e-300)};
}
}  // namespace

// The whole model against PyTorch (tests/golden/make_model_golden.py: bench_torch.py's StepModel on
// the same weights and batch), in fp32 and in bf16. fp32 must agree to fp32's rounding; bf16 is a
// different computation on each side (PyTorch rounds attention scores and probabilities to bf16 and
// sums the tied embedding's gradient in bf16, joule keeps both fp32), so joule's bf16 results must
// be within bf16's precision of PyTorch's, and no further from PyTorch's fp32 than PyTorch's own
// bf16 is (with 50% slack).
TEST_CASE("model: the whole model's loss, logits and gradients match PyTorch in fp32 and in bf16",
          "[model][golden][bf16]") {
  io::H5File const f(joule::test::source_path("tests/golden/model_golden.h5"), io::H5File::Mode::read);
  auto j = nlohmann::json::parse(tiny_config_json("unused.h5").dump());
  j["model"] = nlohmann::json::parse(f.attribute_string("/", "model"));
  auto const cfg = parse_config(j.dump(), "golden config");
  int const batch = int(f.attribute_int("/", "batch"));
  HostBatch host;
  for (float const pixel : f.read<float>("pixels")) host.images.push_back(std::uint8_t(pixel));
  host.tokens = f.read<std::int32_t>("tokens");
  for (int b = 0; b < batch; ++b) host.samples.push_back(b);
  ExecSpace space;
  for (Precision const precision : {Precision::fp32, Precision::bf16}) {
    std::string const tag = precision_name(precision);
    INFO("precision " << tag);
    Model model(cfg.model, batch, 0, {}, precision);
    for (int g = 0; g < model.params.group_count(); ++g) {
      std::string name = g == 0 ? "embed" : g == model.params.group_count() - 1 ? "head" : "block." + std::to_string(g - 1);
      auto const values = f.read<float>("params/" + name);
      REQUIRE(values.size() == model.params.group_storage(g).extent(0));
      from_vector(model.params.group_storage(g), std::vector<double>(values.begin(), values.end()));
    }
    model.update_kernel_weights(space);
    model.zero_gradients(space);
    model.set_batch(space, host, batch);
    double const loss = model.forward(space).loss;
    auto const logits_view = model.logits_to_host(space);
    std::vector<float> const logits(logits_view.data(), logits_view.data() + logits_view.span());
    model.backward(space, 1.0);
    space.fence();
    double const torch32 = f.read<double>("fp32/loss")[0], torch_here = f.read<double>(tag + "/loss")[0];
    auto const ref32_logits = f.read<float>("fp32/logits"), ref_logits = f.read<float>(tag + "/logits");
    auto const fit = compare(logits, ref_logits);
    INFO("loss joule " << loss << ", torch " << tag << " " << torch_here << ", torch fp32 " << torch32
                       << "; logits relative L2 " << fit.relative_l2 << ", worst " << fit.worst);
    if (precision == Precision::fp32) {
      REQUIRE(loss == Approx(torch32).epsilon(2e-6));
      REQUIRE(fit.relative_l2 < 1e-5);
    } else {
      REQUIRE(std::abs(loss - torch_here) <= 5e-3 * torch32);
      REQUIRE(fit.relative_l2 < 2e-2);
      double const ours = compare(logits, ref32_logits).relative_l2, theirs = compare(ref_logits, ref32_logits).relative_l2;
      INFO("logits against torch fp32: joule bf16 " << ours << ", torch bf16 " << theirs);
      REQUIRE(ours <= 1.5 * theirs + 1e-4);
    }
    for (int g = 0; g < model.grads.group_count(); ++g) {
      std::string name = g == 0 ? "embed" : g == model.grads.group_count() - 1 ? "head" : "block." + std::to_string(g - 1);
      auto const got_d = to_vector(model.grads.group_storage(g));
      std::vector<float> const got(got_d.begin(), got_d.end());
      auto const ref = f.read<float>(tag + "/grads/" + name), ref32 = f.read<float>("fp32/grads/" + name);
      auto const g_fit = compare(got, ref);
      INFO("gradient of " << name << ": relative L2 " << g_fit.relative_l2 << ", worst " << g_fit.worst);
      if (precision == Precision::fp32) {
        CHECK(g_fit.relative_l2 < 1e-4);
      } else {
        CHECK(g_fit.relative_l2 < 5e-2);
        double const ours = compare(got, ref32).relative_l2, theirs = compare(ref, ref32).relative_l2;
        INFO("against torch fp32: joule bf16 " << ours << ", torch bf16 " << theirs);
        CHECK(ours <= 1.5 * theirs + 1e-4);
      }
    }
  }
}

TEST_CASE("model: every group holds the parameters its layout declares, tied and untied, at awkward shapes",
          "[model]") {
  for (bool const tied : {true, false})
    for (auto const [layers, d_model, heads, mlp_ratio, image, patch, channels, text] :
         {std::array<int, 8>{1, 48, 3, 3, 12, 4, 1, 7}, std::array<int, 8>{3, 64, 2, 2, 16, 8, 3, 12}}) {
      ModelConfig m;
      m.layers = layers, m.d_model = d_model, m.heads = heads, m.mlp_ratio = mlp_ratio, m.image_size = image;
      m.patch_size = patch, m.channels = channels, m.text_len = text, m.tie_embeddings = tied;
      INFO("tied " << tied << ", d_model " << d_model << ", layers " << layers);
      auto const sizes = parameter_group_sizes(m);
      REQUIRE(sizes.size() == std::size_t(layers + 2));
      ModelParameters<float, DeviceMemory> params("count.", m);
      // (The LM head's padding rows lie past its group's storage: not parameters.)
      std::size_t g = 0;
      params.for_each_group([&](std::string const& name, auto const& storage) {
        INFO(name);
        CHECK(std::size_t(storage.extent(0)) == sizes[g]);
        ++g;
      });
      // Written out by hand, as the code did before the count came from the layouts.
      std::size_t const C = d_model, M = std::size_t(mlp_ratio) * C;
      CHECK(sizes[1] == 4 * C + 3 * C * C + 3 * C + C * C + C + M * C + M + C * M + C);
    }
}
