// The roofline MODEL (core/perf/roofline.hpp): its arithmetic on cases worked out by hand (a GEMM
// in whole and partial waves, a copy below and at the bandwidth Little's law allows, a chain of
// element-wise launches weighed by layers and micro-batches, the offloaded optimizer's timeline),
// and the recorded step it reads: every launch states its work, the model's FLOPs are those the
// step benchmark counts from its own GEMM list, and two recorded layers stand for any depth exactly
// as a recording of every layer does.
#include "bench/bench_step.hpp"
#include "core/detail/launch_log.hpp"
#include "core/ops/detail/packs.hpp"
#include "core/ops/adamw.hpp"
#include "core/perf/roofline.hpp"
#include "core/train/optimizer.hpp"

#include "support/catch.hpp"

#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace joule;
using namespace joule::test;
using detail::KernelWork;
using detail::StepPart;
using detail::WorkKind;

namespace {

perf::Target const& h200() { return perf::target_named("h200"); }

detail::RecordedLaunch launch(char const* label, KernelWork const& work, long threads, StepPart part, int group,
                              bool recompute = false) {
  detail::RecordedLaunch l;
  l.label = label;
  l.note.kokkos = work.gemm_batch == 0;
  l.note.shape.threads = threads;
  l.note.work = work;
  l.note.recompute = recompute;
  l.segment = {part, group};
  return l;
}

// The launches of one training step of `model` (tiny.json's shape), as CUDA would run them.
std::vector<detail::RecordedLaunch> record_step(ModelConfig const& model, int batch, int recompute, Precision precision) {
  detail::LaunchLog log(/*recording=*/false);
  detail::PacksOnHost const as_on_cuda;
  apps::run_training_steps(model, batch, recompute, 1, [&](int) { log.set_recording(true); }, precision,
                           attention_path_on_cuda(precision == Precision::bf16));
  return log.launches();
}

ModelConfig tiny_model() {
  ModelConfig m;
  m.layers = 4, m.d_model = 64, m.heads = 2, m.mlp_ratio = 4, m.image_size = 16, m.patch_size = 8;
  m.channels = 3, m.frames = 1, m.text_len = 12, m.tie_embeddings = true;
  return m;
}

double parameters(ModelConfig const& m) {
  auto const g = parameter_group_sizes(m);
  return std::accumulate(g.begin(), g.end(), 0.0);
}

}  // namespace

TEST_CASE("roofline: a GEMM in whole and in partial waves, by hand", "[roofline]") {
  auto const& t = h200();
  // 8192^3 in bf16: 64 x 64 = 4,096 tiles of 128^2 in ceil(4096 / 132) = 32 waves of 132 SMs.
  KernelWork const big = detail::gemm_work(8192, 8192, 8192, 1, 2, 2, 2, false, true);
  auto const e = perf::estimate_launch(t, big, 0);
  CHECK(e.wave_efficiency == Approx(4096.0 / (32 * 132)));
  CHECK(e.compute_s == Approx(2.0 * 8192 * 8192 * 8192 / (790e12 * 4096.0 / 4224)));
  CHECK(e.memory_s == Approx(3.0 * 8192 * 8192 * 2 / 4.3e12));
  CHECK_FALSE(e.memory_bound());
  CHECK(e.seconds() == Approx(e.compute_s + 3e-6));
  // 146 tiles (a [256, 73 x 128] product): 2 waves, the second nearly empty.
  KernelWork const ragged = detail::gemm_work(256, 73 * 128, 4096, 1, 2, 2, 4, true, true);
  auto const r = perf::estimate_launch(t, ragged, 0);
  CHECK(r.wave_efficiency == Approx(146.0 / 264));
  CHECK(r.compute_s == Approx(ragged.flops / (790e12 * 146.0 / 264)));
  // fp32 GEMMs: SGEMM's rate, or TF32's when the configuration asks for it.
  KernelWork const fp32 = detail::gemm_work(8192, 8192, 8192, 1, 4, 4, 4, false, false);
  CHECK(perf::estimate_launch(t, fp32, 0).compute_s == Approx(fp32.flops / (51e12 * 4096.0 / 4224)));
  CHECK(perf::estimate_launch(t, fp32, 0, true).compute_s == Approx(fp32.flops / (395e12 * 4096.0 / 4224)));
  // The work itself: 2mnk FLOPs; A, B read, C written (and read when it accumulates).
  CHECK(ragged.flops == 2.0 * 256 * 9344 * 4096);
  CHECK(ragged.bytes == 256.0 * 4096 * 2 + 4096.0 * 9344 * 2 + 256.0 * 9344 * 4 * 2);
}

TEST_CASE("roofline: a copy below and at the bandwidth Little's law allows, by hand", "[roofline]") {
  auto const& t = h200();
  // 2^28 floats copied: 2 GiB moved. Bandwidth x latency = 4.3e12 x 0.6e-6 = 2.58 MB must be in
  // flight; a full wave (270,336 threads) with 4 bytes each has 1.08 MB: 41.9 % of the bandwidth.
  double const n = double(1 << 28);
  KernelWork const narrow = detail::moved_work(n, 4);
  CHECK(narrow.bytes == n * 8);
  auto const e = perf::estimate_launch(t, narrow, long(n));
  double const share = 270336.0 * 4 / (4.3e12 * 0.6e-6);
  CHECK(e.memory_parallelism == Approx(share));
  CHECK(e.memory_s == Approx(n * 8 / (4.3e12 * share)));
  CHECK(e.memory_bound());
  // 16-byte loads fill the bandwidth; so do 4-byte ones only from 645,000 threads on, which a
  // wave cannot hold: more threads than a wave add nothing.
  KernelWork wide = narrow;
  wide.bytes_in_flight = 16;
  CHECK(perf::estimate_launch(t, wide, long(n)).memory_s == Approx(n * 8 / 4.3e12));
  CHECK(perf::estimate_launch(t, narrow, 270336 * 4).memory_s == Approx(e.memory_s));
  // 1,024 threads (a column sum's second stage): 4 KB in flight, each byte a latency's worth.
  auto const few = perf::estimate_launch(t, detail::streaming_work(1024, 32 * 4, 4, 32, 4), 1024);
  CHECK(few.memory_parallelism == Approx(1024.0 * 4 / (4.3e12 * 0.6e-6)));
}

TEST_CASE("roofline: an element-wise chain weighed by layers and micro-batches, by hand", "[roofline]") {
  auto const& t = h200();
  // A model of 28 blocks recorded with 2, 3 micro-batches a step, blocks 0-4 recomputed.
  perf::StepLayout layout;
  layout.layers = 28, layout.layers_recorded = 2, layout.recompute_depth = 5, layout.micro_batches = 3;
  layout.parameters = 1000, layout.parameters_recorded = 100;
  REQUIRE(perf::layers_to_record(28) == 2);
  REQUIRE(perf::recompute_depth_to_record(28, 5) == 1);
  CHECK(perf::recompute_depth_to_record(28, 0) == 0);
  CHECK(perf::recompute_depth_to_record(28, 28) == 2);
  CHECK(perf::recompute_depth_to_record(2, 1) == 1);
  CHECK(perf::recorded_group_of(layout, 0) == 0);
  CHECK(perf::recorded_group_of(layout, 1) == 1);   // block 0: recomputed
  CHECK(perf::recorded_group_of(layout, 5) == 1);   // block 4: recomputed
  CHECK(perf::recorded_group_of(layout, 6) == 2);   // block 5: kept
  CHECK(perf::recorded_group_of(layout, 29) == 3);  // the head
  CHECK(perf::segment_weight(layout, {StepPart::forward, 1}) == 5 * 3);
  CHECK(perf::segment_weight(layout, {StepPart::backward, 2}) == 23 * 3);
  CHECK(perf::segment_weight(layout, {StepPart::gradients, 2}) == 23);
  CHECK(perf::segment_weight(layout, {StepPart::update, 3}) == 1);
  CHECK(perf::segment_weight(layout, {StepPart::update, -1}) == 1);
  CHECK(perf::segment_work_scale(layout, {StepPart::update, -1}) == 10);  // the device's 1000 of 100 recorded
  CHECK(perf::segment_work_scale(layout, {StepPart::update, 2}) == 1);

  // Three launches: GELU over 1e6 bf16 elements in blocks 0 and 1, an AdamW over every parameter.
  KernelWork const gelu = detail::streaming_work(1e6, 2, 2, 12, 2);
  KernelWork matmul = detail::gemm_work(512, 512, 512, 1, 2, 2, 2, false, true);
  std::vector<detail::RecordedLaunch> const launches = {
      launch("gelu_forward", gelu, 1'000'000, StepPart::forward, 1),
      launch("gemm_bf16", matmul, 0, StepPart::forward, 2),
      launch("gemm_bf16", matmul, 0, StepPart::backward, 1, /*recompute=*/true),
      launch("adamw_update_runs", detail::adamw_work(100), 100, StepPart::update, -1)};
  auto const one = [&](detail::RecordedLaunch const& l) {
    return perf::estimate_launch(t, l.note.work, l.note.kokkos ? l.note.shape.threads : 0).seconds();
  };
  auto const s = perf::estimate_step(t, launches, layout);
  // The update: one launch over the 1,000 parameters the recording's 100 stand for.
  double const update = perf::estimate_launch(t, detail::adamw_work(1000), 1000).seconds();
  double const want = 15 * one(launches[0]) + 69 * one(launches[1]) + 15 * one(launches[2]) + update;
  CHECK(s.seconds == Approx(want));
  CHECK(s.launches == Approx(15 + 69 + 15 + 1));
  CHECK(s.gap_seconds == Approx(100 * 3e-6));
  CHECK(s.model_flops == Approx(69 * matmul.model_flops));  // the recomputed product is not the model's
  CHECK(s.mfu(t) == Approx(s.model_flops / want / 989e12));
  CHECK(s.kind_seconds[int(WorkKind::gemm)] == Approx(84 * (one(launches[1]) - 3e-6)));
  CHECK(s.kind_seconds[int(WorkKind::optimizer)] == Approx(update - 3e-6));
  REQUIRE(s.forward_s.size() == 30);
  CHECK(s.forward_s[1] == Approx(one(launches[0])));
  CHECK(s.forward_s[6] == Approx(one(launches[1])));
  CHECK(s.update_all_s == Approx(update));
  CHECK(s.kernels.front().label == "gemm_bf16");
  // Offloading half the parameters takes their share of the multi-tensor update off the device.
  layout.offloaded_parameters = 500;
  CHECK(perf::estimate_step(t, launches, layout).update_all_s ==
        Approx(perf::estimate_launch(t, detail::adamw_work(500), 500).seconds()));
}

TEST_CASE("roofline: the offloaded optimizer's timeline, by hand", "[roofline]") {
  auto const& t = perf::target_named("gh200");
  // Three groups (embed, one block, head), each pass 1 ms on the device; the block and the head on
  // the host, each 1 ms on the link either way and 1 ms of host AdamW: their gradients to the host
  // as the backward pass finishes them, AdamW after the backward pass (clipping), their weights
  // back in forward order.
  perf::StepEstimate step;
  step.forward_s = {1e-3, 1e-3, 1e-3};
  step.backward_s = {1e-3, 1e-3, 1e-3};
  step.update_s = {0.5e-3, 0.5e-3, 0.5e-3};
  step.update_all_s = 0;
  perf::OffloadPlan plan;
  plan.group_parameters = {1e6, 297e6 / 8, 297e6 / 8};  // 37,125,000 parameters: 1 ms on the link at 8 B
  plan.offloaded = {false, true, true};
  plan.to_host_bytes = 8, plan.to_device_bytes = 375.0 / 297 * 8;  // 1 ms back as well
  plan.host_bytes = 450.0 / 297 * 8;                               // 1 ms on the host
  plan.clipping = true;
  auto const o = perf::estimate_offload(t, plan, step);
  // Backward: head ready at 1, lands at 2; block ready at 2, lands at 3; backward ends at 3.
  // Host: block 3-4, head 4-5. Back: block 4-5, head 5-6. Device: update of embed 3-3.5, forward
  // embed 3.5-4.5, block waits until 5, runs 5-6, head 6-7. Alone it would end at 6.5.
  CHECK(o.exposed_s == Approx(0.5e-3));
  CHECK(o.host_s == Approx(2e-3));
  CHECK(o.link_s == Approx(4e-3));
  CHECK(o.link_bytes == Approx(2 * 37.125e6 * (8 + 375.0 / 297 * 8)));
  CHECK(o.host_bytes == Approx(2 * 37.125e6 * 450.0 / 297 * 8));
  // Without clipping the updates are handed over as the gradients are ready, the head's first:
  // head 2-3, block 3-4 (its gradient lands at 3); back: head 3-4, block 4-5: the block's forward
  // still waits until 5.
  plan.clipping = false;
  CHECK(perf::estimate_offload(t, plan, step).exposed_s == Approx(0.5e-3));
  // Nothing offloaded: nothing exposed, nothing moved.
  plan.offloaded = {false, false, false};
  auto const none = perf::estimate_offload(t, plan, step);
  CHECK(none.exposed_s == 0);
  CHECK(none.link_bytes == 0);
  CHECK_THROWS(perf::estimate_offload(t, perf::OffloadPlan{}, step));
  CHECK_THROWS_WITH(perf::target_named("a100"), Contains("h200") && Contains("gh200"));
}

// The energy MODEL (issue 69): each launch's FLOPs at its unit's energy and its bytes at HBM's; a
// step's energy by device, the offloaded optimizer's link and host traffic and the static power
// over the step's time; worked out by hand from the target's coefficients.
TEST_CASE("roofline energy: a copy, GEMMs on each unit and an element-wise kernel, by hand", "[roofline][energy]") {
  auto const& t = h200();
  auto const copy = perf::estimate_launch(t, detail::moved_work(1e6, 4), 1'000'000);
  CHECK(copy.compute_j == 0);
  CHECK(copy.memory_j == Approx(8e6 * t.hbm_energy.value));
  KernelWork const bf16 = detail::gemm_work(4096, 1024, 512, 3, 2, 2, 2, false, true);
  auto const on_tensor = perf::estimate_launch(t, bf16, 0);
  CHECK(on_tensor.compute_j == Approx(2.0 * 4096 * 1024 * 512 * 3 * t.bf16_tensor_energy.value));
  CHECK(on_tensor.memory_j == Approx(3.0 * (4096.0 * 512 * 2 + 512.0 * 1024 * 2 + 4096.0 * 1024 * 2) * t.hbm_energy.value));
  KernelWork const fp32 = detail::gemm_work(300, 200, 100, 1, 4, 4, 4, true, false);
  CHECK(perf::estimate_launch(t, fp32, 0, /*tf32=*/true).compute_j == Approx(2.0 * 300 * 200 * 100 * t.tf32_tensor_energy.value));
  CHECK(perf::estimate_launch(t, fp32, 0, /*tf32=*/false).compute_j == Approx(2.0 * 300 * 200 * 100 * t.fp32_simt_energy.value));
  CHECK(perf::estimate_launch(t, fp32, 0).memory_j == Approx((300.0 * 100 + 100.0 * 200 + 2 * 300.0 * 200) * 4 * t.hbm_energy.value));
  auto const gelu = perf::estimate_launch(t, detail::streaming_work(1e6, 8, 4, 3, 4), 1'000'000);
  CHECK(gelu.compute_j == Approx(3e6 * t.fp32_simt_energy.value));
  CHECK(gelu.memory_j == Approx(12e6 * t.hbm_energy.value));
  // Every coefficient is there and says where it comes from.
  for (auto const* target : {&h200(), &perf::target_named("gh200")})
    for (auto f : {&perf::Target::bf16_tensor_energy, &perf::Target::tf32_tensor_energy, &perf::Target::fp32_simt_energy,
                   &perf::Target::hbm_energy, &perf::Target::link_energy, &perf::Target::host_memory_energy,
                   &perf::Target::host_flop_energy, &perf::Target::device_static_power,
                   &perf::Target::host_static_power, &perf::Target::device_power_limit}) {
      CHECK((target->*f).value > 0);
      CHECK((target->*f).source.size() > 10);
    }
}

TEST_CASE("roofline energy: a step by device, the offloaded optimizer and the static power, by hand", "[roofline][energy]") {
  auto const& t = perf::target_named("gh200");
  perf::StepLayout layout;
  layout.layers = 6, layout.layers_recorded = 2, layout.micro_batches = 2;
  layout.parameters = 1000, layout.parameters_recorded = 500;
  KernelWork const gelu = detail::streaming_work(1e6, 2, 2, 12, 2);
  KernelWork const matmul = detail::gemm_work(512, 512, 512, 1, 2, 2, 2, false, true);
  std::vector<detail::RecordedLaunch> const launches = {
      launch("gelu_forward", gelu, 1'000'000, StepPart::forward, 1),          // block 0: 1 of 6 blocks, x2 micro-batches
      launch("gemm_bf16", matmul, 0, StepPart::backward, 2),                  // block 1: 5 of 6, x2
      launch("adamw_update_runs", detail::adamw_work(500), 500, StepPart::update, -1)};  // x2 parameters
  auto const s = perf::estimate_step(t, launches, layout);
  auto const at = [&](KernelWork const& w, long threads) { return perf::estimate_launch(t, w, threads); };
  double const gemm_flop_j = 10 * at(matmul, 0).compute_j, gemm_byte_j = 10 * at(matmul, 0).memory_j;
  CHECK(s.kind_compute_j[int(WorkKind::gemm)] == Approx(gemm_flop_j));
  CHECK(s.kind_memory_j[int(WorkKind::gemm)] == Approx(gemm_byte_j));
  CHECK(s.kind_compute_j[int(WorkKind::elementwise)] == Approx(2 * 12e6 * t.fp32_simt_energy.value));
  CHECK(s.kind_memory_j[int(WorkKind::elementwise)] == Approx(2 * 4e6 * t.hbm_energy.value));
  CHECK(s.kind_memory_j[int(WorkKind::optimizer)] == Approx(detail::adamw_work(1000).bytes * t.hbm_energy.value));
  // Without offload: the device's launches and the static power of both sides over the step.
  auto const alone = perf::estimate_energy(t, s);
  double const dynamic = gemm_flop_j + gemm_byte_j + 2 * 12e6 * t.fp32_simt_energy.value + 2 * 4e6 * t.hbm_energy.value +
                         (detail::adamw_work(1000).flops * t.fp32_simt_energy.value + detail::adamw_work(1000).bytes * t.hbm_energy.value);
  CHECK(alone.seconds == Approx(s.seconds));
  CHECK(alone.device_compute_j + alone.device_memory_j == Approx(dynamic));
  CHECK(alone.device_static_j == Approx(t.device_static_power.value * s.seconds));
  CHECK(alone.host_static_j == Approx(t.host_static_power.value * s.seconds));
  CHECK(alone.link_j == 0);
  CHECK(alone.host_memory_j == 0);
  CHECK(alone.host_compute_j == 0);
  CHECK(alone.joules() == Approx(dynamic + (t.device_static_power.value + t.host_static_power.value) * s.seconds));
  CHECK(alone.device_watts() == Approx(alone.device_j() / s.seconds));
  // With the optimizer offloaded: 1e9 bytes over the link (read and written at both ends), 2e9
  // through the host's memory, 3e8 host FLOPs, 10 ms exposed.
  perf::OffloadEstimate o;
  o.link_bytes = 1e9, o.host_bytes = 2e9, o.host_flops = 3e8, o.exposed_s = 0.01;
  auto const e = perf::estimate_energy(t, s, o);
  CHECK(e.seconds == Approx(s.seconds + 0.01));
  CHECK(e.device_memory_j == Approx(alone.device_memory_j + 1e9 * t.hbm_energy.value));
  CHECK(e.link_j == Approx(1e9 * 10.4e-12));  // NVLink-C2C: 1.3 pJ/bit
  CHECK(e.host_memory_j == Approx(3e9 * t.host_memory_energy.value));
  CHECK(e.host_compute_j == Approx(3e8 * t.host_flop_energy.value));
  CHECK(e.device_static_j == Approx(t.device_static_power.value * (s.seconds + 0.01)));
  CHECK(e.host_static_j == Approx(t.host_static_power.value * (s.seconds + 0.01)));
  // estimate_offload counts the host's FLOPs per offloaded parameter.
  perf::StepEstimate three;
  three.forward_s = three.backward_s = three.update_s = {1e-3, 1e-3, 1e-3};
  perf::OffloadPlan plan;
  plan.group_parameters = {10, 20, 30};
  plan.offloaded = {false, true, true};
  plan.to_host_bytes = plan.to_device_bytes = 4, plan.host_bytes = 28, plan.host_flops = 17;
  CHECK(perf::estimate_offload(t, plan, three).host_flops == Approx(50 * 17));
}

TEST_CASE("roofline energy: more bytes or FLOPs never predict less, and energy is not time times a constant",
          "[roofline][energy]") {
  std::mt19937 rng(69);
  std::uniform_real_distribution<double> size(1e4, 1e8);
  std::uniform_int_distribution<int> pick(0, 2);
  for (auto const* target : {&h200(), &perf::target_named("gh200")}) {
    perf::StepLayout layout;
    layout.layers = 4, layout.layers_recorded = 2, layout.micro_batches = 2;
    layout.parameters = layout.parameters_recorded = 1e6;
    std::vector<detail::RecordedLaunch> launches;
    for (int i = 0; i < 24; ++i) {
      int const kind = pick(rng);
      KernelWork const w = kind == 0   ? detail::moved_work(size(rng), 2)
                           : kind == 1 ? detail::streaming_work(size(rng), 4, 4, 20 * pick(rng), 4)
                                       : detail::gemm_work(long(size(rng)) % 4000 + 1, 777, 129, 1, 2, 2, 4, pick(rng) == 1, true);
      launches.push_back(launch("k", w, 1'000'000, i % 2 ? StepPart::forward : StepPart::backward, 1 + i % 2));
    }
    perf::OffloadEstimate offload;
    offload.link_bytes = 1e8, offload.host_bytes = 3e8, offload.host_flops = 1e8, offload.exposed_s = 1e-3;
    double const before = perf::estimate_energy(*target, perf::estimate_step(*target, launches, layout), offload).joules();
    for (std::size_t i = 0; i < launches.size(); ++i)
      for (bool bytes : {true, false}) {
        auto more = launches;
        (bytes ? more[i].note.work.bytes : more[i].note.work.flops) *= 1.5;
        double const after = perf::estimate_energy(*target, perf::estimate_step(*target, more, layout), offload).joules();
        INFO(target->name << ", launch " << i << (bytes ? ": 1.5x the bytes" : ": 1.5x the FLOPs"));
        CHECK(after >= before);
      }
    for (auto grown : {&perf::OffloadEstimate::link_bytes, &perf::OffloadEstimate::host_bytes,
                       &perf::OffloadEstimate::host_flops, &perf::OffloadEstimate::exposed_s}) {
      perf::OffloadEstimate more = offload;
      more.*grown *= 2;
      CHECK(perf::estimate_energy(*target, perf::estimate_step(*target, launches, layout), more).joules() > before);
    }
  }
  // Two steps of the same time, one moving more bytes (a compute-bound GEMM reading a wider C):
  // the same MODEL time, more energy.
  auto const& t = h200();
  KernelWork narrow = detail::gemm_work(8192, 8192, 8192, 1, 2, 2, 2, false, true), wide = narrow;
  wide.bytes *= 3;
  auto const a = perf::estimate_launch(t, narrow, 0), b = perf::estimate_launch(t, wide, 0);
  REQUIRE_FALSE(b.memory_bound());
  CHECK(a.seconds() == b.seconds());
  CHECK(b.compute_j + b.memory_j > a.compute_j + a.memory_j);
  // An average power over the GPU's limit is said, naming both.
  perf::Target tight = t;
  tight.device_power_limit.value = 1;
  perf::StepEstimate busy;
  busy.seconds = 1e-3;
  busy.kind_compute_j[0] = 1;  // 1 J in 1 ms: 1 kW
  auto const hot = perf::estimate_energy(tight, busy);
  CHECK_THAT(perf::power_limit_warning(tight, hot), Contains("exceeds the h200's 1 W limit"));
  CHECK(perf::power_limit_warning(t, perf::estimate_energy(t, perf::StepEstimate{})).empty());
}

TEST_CASE("roofline energy: a power limit lowers the clock by the stated rule, and never shortens the step",
          "[roofline][energy]") {
  auto const& t = perf::target_named("gh200");
  // 10 ms of launches with 4 J of dynamic energy (400 W) and 100 W static: 500 W unlimited.
  perf::StepEstimate step;
  step.seconds = 0.01;
  step.kind_compute_j[int(WorkKind::gemm)] = 3;
  step.kind_memory_j[int(WorkKind::elementwise)] = 1;
  perf::OffloadEstimate offload;
  offload.link_bytes = 1e8, offload.host_bytes = 1e8, offload.exposed_s = 0.002;
  auto const free = perf::estimate_energy(t, step, offload);
  REQUIRE(t.device_static_power.value == 100);
  // At or above 500 W nothing changes.
  for (double limit : {0.0, 500.0, 700.0}) {
    auto const e = perf::estimate_energy(t, step, offload, limit);
    CHECK(e.clock_scale == 1);
    CHECK(e.seconds == free.seconds);
    CHECK(e.joules() == Approx(free.joules()));
  }
  // At 150 W: s = cbrt(50 / 400) = 0.5: the launches take 20 ms, their dynamic energy a quarter.
  auto const half = perf::estimate_energy(t, step, offload, 150);
  CHECK(half.clock_scale == Approx(0.5));
  CHECK(half.seconds == Approx(0.02 + 0.002));
  CHECK(half.device_compute_j + half.device_memory_j == Approx(1.0 + 1e8 * t.hbm_energy.value));
  CHECK(half.device_static_j == Approx(100 * 0.022));
  CHECK(half.host_static_j == Approx(t.host_static_power.value * 0.022));
  CHECK(half.link_j == Approx(free.link_j));
  CHECK((1.0 + 100 * 0.02) / 0.02 == Approx(150));  // the launches draw the limit
  // A lower limit never predicts a shorter step, nor a faster clock.
  double last_seconds = 0, last_scale = 2;
  for (double limit = 600; limit > 100.5; limit -= 12.5) {
    auto const e = perf::estimate_energy(t, step, offload, limit);
    INFO("limit " << limit << " W");
    CHECK(e.seconds >= last_seconds);
    CHECK(e.clock_scale <= last_scale);
    last_seconds = e.seconds, last_scale = e.clock_scale;
  }
  CHECK_THROWS_WITH(perf::estimate_energy(t, step, offload, 100),
                    Contains("100 W is not above the gh200's static power, 100 W"));
  CHECK_THROWS_AS(perf::estimate_energy(t, step, offload, 50), std::invalid_argument);
}

TEST_CASE("roofline: every launch of a recorded step states its work, as CUDA would run it", "[roofline]") {
  ModelConfig const m = tiny_model();
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(precision));
    auto const launches = record_step(m, 3, 1, precision);
    REQUIRE(launches.size() > 50);
    std::set<std::string> labels;
    for (auto const& l : launches) {
      INFO(l.label);
      CHECK(l.note.work.bytes > 0);
      CHECK(l.note.work.bytes_in_flight > 0);
      labels.insert(l.label);
    }
    if (precision == Precision::bf16) {
      // cuBLASLt's calls only: none of the CPU's widening kernels or fp32 GEMMs behind them, and
      // attention through batched GEMMs (the CUDA path), counted as attention.
      CHECK(labels.count("gemm") == 0);
      CHECK(labels.count("gemm_bf16_batched_widen") == 0);
      CHECK(labels.count("gemm_bf16_batched") == 1);
      CHECK(labels.count("attention_forward") == 0);
      for (auto const& l : launches)
        if (l.label.rfind("attention_gemm", 0) == 0 || l.label == "gemm_bf16_batched") CHECK(l.note.work.kind == WorkKind::attention);
    } else {
      CHECK(labels.count("gemm") == 1);
      CHECK(labels.count("attention_forward") == 1);
    }
    // Every group's forward and backward passes were marked.
    std::set<std::pair<int, int>> segments;
    for (auto const& l : launches) segments.insert({int(l.segment.part), l.segment.group});
    for (int g = 0; g < m.layers + 2; ++g) {
      CHECK(segments.count({int(StepPart::forward), g}) == 1);
      CHECK(segments.count({int(StepPart::backward), g}) == 1);
    }
  }
}

TEST_CASE("roofline: the model's FLOPs of a recorded step are the step benchmark's count", "[roofline]") {
  ModelConfig const m = tiny_model();
  int const batch = 3;
  // The step benchmark counts them from its own list of GEMMs and the mask's visible pairs
  // (apps/bench/bench_step.cpp); the notes count them launch by launch.
  apps::StepShape const shape{"t", "t", m.layers, m.d_model, m.heads, m.image_size, m.patch_size, m.text_len, batch};
  double const want = apps::step_flops(shape).total();
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (int recompute : {0, 2}) {
      INFO(precision_name(precision) << ", recompute depth " << recompute);
      perf::StepLayout layout;
      layout.layers = layout.layers_recorded = m.layers, layout.recompute_depth = recompute;
      layout.parameters = layout.parameters_recorded = parameters(m);
      auto const s = perf::estimate_step(h200(), record_step(m, batch, recompute, precision), layout);
      CHECK(s.model_flops == Approx(want).epsilon(1e-9));
    }
}

TEST_CASE("roofline: two recorded layers stand for every depth as a whole recording does", "[roofline]") {
  ModelConfig const m = tiny_model();  // 4 layers
  int const batch = 2;
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (int depth : {0, 1, 3, 4}) {
      INFO(precision_name(precision) << ", recompute depth " << depth);
      perf::StepLayout whole;
      whole.layers = whole.layers_recorded = m.layers, whole.recompute_depth = depth, whole.micro_batches = 2;
      whole.parameters = whole.parameters_recorded = parameters(m);
      whole.offloaded = choose_offloaded_groups(parameter_group_sizes(m), 0.5);
      auto const full = perf::estimate_step(h200(), record_step(m, batch, depth, precision), whole);
      ModelConfig two = m;
      two.layers = perf::layers_to_record(m.layers);
      perf::StepLayout part = whole;
      part.layers_recorded = two.layers, part.parameters_recorded = parameters(two);
      auto const sampled =
          perf::estimate_step(h200(), record_step(two, batch, perf::recompute_depth_to_record(m.layers, depth), precision), part);
      CHECK(sampled.seconds == Approx(full.seconds).epsilon(1e-9));
      CHECK(sampled.launches == Approx(full.launches).epsilon(1e-9));
      CHECK(sampled.model_flops == Approx(full.model_flops).epsilon(1e-9));
      for (int k = 0; k < detail::kWorkKinds; ++k) CHECK(sampled.kind_seconds[k] == Approx(full.kind_seconds[k]).epsilon(1e-9));
      REQUIRE(sampled.forward_s.size() == full.forward_s.size());
      for (std::size_t g = 0; g < full.forward_s.size(); ++g) {
        CHECK(sampled.forward_s[g] == Approx(full.forward_s[g]).epsilon(1e-12));
        CHECK(sampled.backward_s[g] == Approx(full.backward_s[g]).epsilon(1e-12));
      }
    }
}

TEST_CASE("roofline: what the launching thread is doing changes the notes", "[roofline]") {
  detail::LaunchLog log;
  KernelWork const product = detail::gemm_work(10, 20, 30, 1, 2, 2, 2, false, true);
  detail::note_library_launch("plain", product);
  {
    detail::ModelShare const share(0.5);
    detail::CountAs const as(WorkKind::attention);
    detail::Recomputing const again;
    detail::note_library_launch("scoped", product);
    detail::NotOnCuda const cpu_only;
    detail::note_library_launch("hidden", product);
  }
  detail::note_library_launch("after", product);
  auto const launches = log.launches();
  REQUIRE(launches.size() == 3);
  CHECK(launches[0].note.work.model_flops == product.model_flops);
  CHECK(launches[1].label == "scoped");
  CHECK(launches[1].note.work.model_flops == product.model_flops / 2);
  CHECK(launches[1].note.work.flops == product.flops);
  CHECK(launches[1].note.work.kind == WorkKind::attention);
  CHECK(launches[1].note.recompute);
  CHECK(launches[2].label == "after");
  CHECK(launches[2].note.work.model_flops == product.model_flops);
  CHECK(launches[2].note.work.kind == WorkKind::gemm);
  CHECK_FALSE(launches[2].note.recompute);
  CHECK_FALSE(launches[2].note.kokkos);
}
