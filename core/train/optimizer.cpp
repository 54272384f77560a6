#include "core/train/optimizer.hpp"

#include "core/detail/ordering_trace.hpp"
#include "core/io/h5file.hpp"
#include "core/precision/convert.hpp"
#include "core/train/host_cores.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

namespace joule {

std::vector<bool> choose_offloaded_groups(std::vector<std::size_t> const& sizes, double ratio) {
  require(ratio >= 0.0 && ratio <= 1.0, "choose_offloaded_groups",
          "offload_ratio must be in [0, 1], got " + std::to_string(ratio));
  std::size_t total = 0;
  for (auto s : sizes) total += s;
  double const target = ratio * double(total);
  // Groups of one size are interchangeable for the share, so a choice is how many of each size
  // go, and every count is tried (a model's blocks are one size: at most 4 (layers + 1) choices).
  // Each size's groups in backward-completion order: last group (head) first, then blocks from
  // the last, then embed.
  std::vector<std::size_t> size_of;             // each distinct size
  std::vector<std::vector<std::size_t>> order;  // its groups, the earliest ready first
  for (std::size_t k = sizes.size(); k-- > 0;) {
    std::size_t const j = std::size_t(std::find(size_of.begin(), size_of.end(), sizes[k]) - size_of.begin());
    if (j == size_of.size()) size_of.push_back(sizes[k]), order.emplace_back();
    order[j].push_back(k);
  }
  std::size_t choices = 1;
  for (auto const& groups : order) {
    choices *= groups.size() + 1;
    require(choices <= (std::size_t(1) << 24), "choose_offloaded_groups",
            std::to_string(sizes.size()) + " groups of too many sizes to try every choice");
  }
  std::vector<std::size_t> count(order.size()), best_count(order.size());
  double best = INFINITY;
  std::size_t best_host = 0;
  for (std::size_t c = 0; c < choices; ++c) {
    std::size_t rest = c, host = 0;
    for (std::size_t j = 0; j < order.size(); ++j) {
      count[j] = rest % (order[j].size() + 1);
      rest /= order[j].size() + 1;
      host += count[j] * size_of[j];
    }
    double const distance = std::abs(double(host) - target);
    // Of two as close, the smaller share: less to copy over the link each step.
    if (distance < best || (distance == best && host < best_host)) best = distance, best_host = host, best_count = count;
  }
  std::vector<bool> chosen(sizes.size(), false);
  for (std::size_t j = 0; j < order.size(); ++j)
    for (std::size_t i = 0; i < best_count[j]; ++i) chosen[order[j][i]] = true;
  return chosen;
}

LinkBytesPerParameter link_bytes_per_parameter(Precision precision, bool cast_on_host) {
  bool const bf16_copy = held_in_bf16(precision, Held::kernel_weights);
  return {held_bytes(precision, Held::parameter_gradients),
          bf16_copy && cast_on_host ? sizeof(bf16) : held_bytes(precision, Held::master_weights)};
}

bool offload_on_worker() { return !kDeviceIsHost || !host_cores().optimizer.empty(); }

bool offload_speculates(double grad_clip, bool speculate) { return speculate && grad_clip > 0 && offload_on_worker(); }

OptimizerMemory estimate_optimizer_memory(ModelConfig const& m, double offload_ratio, Precision precision,
                                          bool cast_on_host, bool speculative) {
  auto const sizes = parameter_group_sizes(m);
  auto const chosen = choose_offloaded_groups(sizes, offload_ratio);
  OptimizerMemory r;
  std::size_t total = 0, host = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    total += sizes[i];
    if (chosen[i]) host += sizes[i];
  }
  std::size_t const second_set = speculative && chosen[kLastReadyGroup] ? host - sizes[kLastReadyGroup] : speculative ? host : 0;
  r.device = 2 * (total - host) * sizeof(float);
  r.host = (4 * host + 3 * second_set) * sizeof(float) +
           (held_in_bf16(precision, Held::kernel_weights) && cast_on_host ? host * sizeof(bf16) : 0);
  r.achieved_ratio = total ? double(host) / total : 0.0;
  return r;
}

namespace {
// The rounding to bf16 the device's convert_precision does (core/precision/bf16.hpp: one function
// for host and device), as a host loop over [begin, end).
void round_to_bf16(bf16* out, float const* in, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) out[i] = bf16(in[i]);
}

template <class F>
void for_each_run(std::vector<std::pair<std::size_t, std::size_t>> const& decayed, std::size_t n, F&& f);
}  // namespace

Optimizer::Optimizer(Model& model, OptimizerSettings const& settings)
    : model_(model),
      settings_(settings),
      compute_(),
      copies_(compat::independent_instance<ExecSpace>()),
      host_to_device_(compat::independent_instance<ExecSpace>()) {
  model_.params.for_each_group([&](std::string const& name, auto const& storage) {
    Group g;
    g.name = name;
    g.param = storage;
    groups_.push_back(std::move(g));
    names_.push_back(name);
  });
  std::size_t k = 0;
  model_.grads.for_each_group([&](std::string const&, auto const& storage) { groups_[k++].grad = storage; });
  bool const bf16_copy = held_in_bf16(model_.precision(), Held::kernel_weights);
  if (bf16_copy)
    for (std::size_t i = 0; i < groups_.size(); ++i) groups_[i].kernel_weights = model_.kernel_weights.group_storage(int(i));
  cast_on_host_ = bf16_copy && settings.cast_on_host;
  // Weight decay by role (weight_decayed: matrices, not biases, norms or embedding tables): the
  // slices of each group's buffer that hold such tensors.
  {
    std::size_t group = 0, offset = 0;
    model_.params.for_each_tensor([&](std::string const& name, ParamRole role, auto const& view) {
      while (group < groups_.size() && name.rfind(groups_[group].name + ".", 0) != 0) {
        ++group;
        offset = 0;
      }
      std::size_t const n = view.span();
      if (weight_decayed(role)) {
        groups_[group].decayed.emplace_back(offset, offset + n);
        decayed_names_.push_back(name);
      }
      offset += n;
    });
  }
  std::vector<std::size_t> sizes;
  for (auto const& g : groups_) sizes.push_back(g.param.extent(0));
  offloaded_ = choose_offloaded_groups(sizes, settings.offload_ratio);
  bool const any_offloaded = std::find(offloaded_.begin(), offloaded_.end(), true) != offloaded_.end();
  speculative_ = any_offloaded && offload_speculates(settings.grad_clip, settings.speculate);
  std::size_t total = 0, host = 0;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    std::size_t const n = g.param.extent(0);
    total += n;
    if (offloaded_[i]) {
      host += n;
      g.host_param = Tensor1<float, PinnedHostMemory>(label(("host.param." + g.name).c_str()), n);
      g.host_grad = Tensor1<float, PinnedHostMemory>(label(("host.grad." + g.name).c_str()), n);
      g.host_m = Tensor1<float, PinnedHostMemory>(label(("host.adam_m." + g.name).c_str()), n);
      g.host_v = Tensor1<float, PinnedHostMemory>(label(("host.adam_v." + g.name).c_str()), n);
      if (cast_on_host_)
        g.host_kernel_weights = Tensor1<bf16, PinnedHostMemory>(label(("host.weight_bf16." + g.name).c_str()), n);
      if (speculative_ && int(i) != kLastReadyGroup) {
        g.next_param = Tensor1<float, PinnedHostMemory>(label(("host.param_next." + g.name).c_str()), n);
        g.next_m = Tensor1<float, PinnedHostMemory>(label(("host.adam_m_next." + g.name).c_str()), n);
        g.next_v = Tensor1<float, PinnedHostMemory>(label(("host.adam_v_next." + g.name).c_str()), n);
      }
    } else {
      g.m = Tensor1<float, DeviceMemory>(label(("adam_m." + g.name).c_str()), n);
      g.v = Tensor1<float, DeviceMemory>(label(("adam_v." + g.name).c_str()), n);
    }
  }
  achieved_ratio_ = total ? double(host) / double(total) : 0.0;
  {
    std::vector<AdamWRun<float>> runs;
    for (std::size_t i = 0; i < groups_.size(); ++i) {
      Group& g = groups_[i];
      if (offloaded_[i]) continue;
      for_each_run(g.decayed, g.param.extent(0), [&](std::size_t begin, std::size_t end, bool decay) {
        runs.push_back({g.param.data() + begin, g.grad.data() + begin, g.m.data() + begin, g.v.data() + begin,
                        device_elements_, decay ? 1 : 0});
        device_elements_ += (long long)(end - begin);
      });
    }
    device_runs_ = Kokkos::View<AdamWRun<float>*, DeviceMemory>(label("optimizer.device_runs"), runs.size());
    auto h = Kokkos::create_mirror_view(device_runs_);
    std::copy(runs.begin(), runs.end(), h.data());
    Kokkos::deep_copy(device_runs_, h);
  }
  norm_parts_ = Kokkos::View<double*, DeviceMemory>(label("optimizer.norm_parts"), groups_.size());
  norm_parts_host_ = Kokkos::create_mirror_view(norm_parts_);
  norm_started_.assign(groups_.size(), 0);
  // The host jobs get threads of their own where there is something to overlap with: always on a
  // GPU; on a CPU-only build only when cores are set aside for them (JOULE_HOST_CORES).
  auto const& reserved = host_cores().optimizer;
  if (host > 0 && offload_on_worker()) {
    int const threads = settings.host_threads > 0 ? settings.host_threads
                        : !reserved.empty()       ? int(reserved.size())
                                                  : 1;  // a GPU build on a 1-CPU process
    worker_ = std::make_unique<HostWorker>(int(groups_.size()), threads, reserved, [this](int g) { host_job(g); });
  }
  times_.on_worker = worker_ != nullptr;
}

Optimizer::~Optimizer() = default;  // the worker (declared last) finishes its queue first

std::size_t Optimizer::device_state_bytes() const {
  std::size_t b = 0;
  for (auto const& g : groups_) b += (g.m.extent(0) + g.v.extent(0)) * sizeof(float);
  return b;
}

std::size_t Optimizer::host_state_bytes() const {
  std::size_t b = 0;
  for (auto const& g : groups_)
    b += (g.host_param.extent(0) + g.host_grad.extent(0) + g.host_m.extent(0) + g.host_v.extent(0) +
          g.next_param.extent(0) + g.next_m.extent(0) + g.next_v.extent(0)) * sizeof(float) +
         g.host_kernel_weights.extent(0) * sizeof(bf16);
  return b;
}

void Optimizer::sync_master_weights() {
  wait_all();
  for (auto& g : groups_)
    if (g.host_param.extent(0)) Kokkos::deep_copy(g.host_param, g.param);
  ExecSpace const space;
  model_.update_kernel_weights(space);  // whatever wrote params wrote the fp32 weights only
  space.fence();
}

void Optimizer::begin_step(double lr, long step) {
  abandon_step();  // a step left unfinished (an exception between the backward pass and its end)
  lr_ = lr;
  step_ = step;
  if (auto* t = ordering::trace()) t->set_step(step);
  // This step's backward passes overwrite the gradient buffers (zero_gradients first): on the
  // compute instance, after last step's device -> host copies of them have read them. Without
  // this the next memset can run while the copy instance is still reading, and the host AdamW
  // would update with a partly zeroed gradient (tests/test_training.cpp, "[ordering]").
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    if (!g.copied) continue;
    g.landed.make_wait(compute_);
    ordering::stream_waits(ordering::Lane::compute, &g.landed);
  }
  for (auto& g : groups_) g.copied = g.handed_over = false;
  std::fill(norm_started_.begin(), norm_started_.end(), 0);
}

namespace {
// f(begin, end, decayed) for the runs of a group's buffer of n elements, which alternate between
// decayed (matrices: the [begin, end) slices in `decayed`) and not decayed; empty runs skipped.
template <class F>
void for_each_run(std::vector<std::pair<std::size_t, std::size_t>> const& decayed, std::size_t n, F&& f) {
  std::size_t pos = 0;
  auto run = [&](std::size_t begin, std::size_t end, bool decay) {
    if (begin < end) f(begin, end, decay);
  };
  for (auto const& [b, e] : decayed) {
    run(pos, b, false);
    run(b, e, true);
    pos = e;
  }
  run(pos, n, false);
}

template <class Space, class P, class G, class M>
void adamw_slices(Space const& space, std::vector<std::pair<std::size_t, std::size_t>> const& decayed,
                  P const& p, G const& g, M const& m, M const& v, AdamWConfig cfg, double weight_decay,
                  long step, double scale, int threads) {
  for_each_run(decayed, p.extent(0), [&](std::size_t begin, std::size_t end, bool decay) {
    auto const r = std::make_pair(begin, end);
    cfg.weight_decay = decay ? weight_decay : 0.0;
    adamw_update(space, Kokkos::subview(p, r), Kokkos::subview(g, r), Kokkos::subview(m, r),
                 Kokkos::subview(v, r), cfg, step, scale, threads);
  });
}
}  // namespace

AdamWConfig Optimizer::adamw_config() const {
  AdamWConfig cfg;  // weight decay is set per slice
  cfg.lr = lr_;
  cfg.beta1 = settings_.beta1;
  cfg.beta2 = settings_.beta2;
  cfg.eps = settings_.eps;
  return cfg;
}

void Optimizer::copy_gradient_to_host(int group) {
  Group& g = groups_[group];
  if (g.copied) return;
  // The copy instance starts once the compute instance has written the gradient (an event, not a
  // host fence); "landed" tells the host job when it is there.
  using ordering::Lane;
  g.grad_final.record(compute_);
  ordering::event_recorded(&g.grad_final, Lane::compute);
  g.grad_final.make_wait(copies_);
  ordering::stream_waits(Lane::copies, &g.grad_final);
  {
    compat::ScopedRegion region(copies_, "d2h");
    Kokkos::deep_copy(copies_, g.host_grad, g.grad);
    ordering::on_stream(Lane::copies, "d2h", {{"grad", group}}, {{"host_grad", group}});
  }
  times_.bytes_to_host += double(g.grad.span() * sizeof(float));
  g.landed.record(copies_);
  ordering::event_recorded(&g.landed, Lane::copies);
  g.copied = true;
}

void Optimizer::hand_over(int group, double grad_scale) {
  Group& g = groups_[group];
  if (g.handed_over) return;
  copy_gradient_to_host(group);
  // The job reads its settings from here, not from the optimizer, which moves on to the next step.
  g.job_config = adamw_config();
  g.job_step = step_;
  g.scale = grad_scale;
  g.job_in = {g.host_param.data(), g.host_m.data(), g.host_v.data()};
  g.job_out = g.speculating ? detail::AdamWState<float>{g.next_param.data(), g.next_m.data(), g.next_v.data()} : g.job_in;
  g.handed_over = true;
  g.ordered = false;
  // What its job will copy back up (counted here, on the launching thread, as the gradient was).
  times_.bytes_to_device += double(cast_on_host_ ? g.param.span() * sizeof(bf16) : g.param.span() * sizeof(float));
  if (worker_) {
    ordering::signal(&g.trace_submitted);
    worker_->submit(group);
  } else {
    auto const t0 = HostWorker::Clock::now();
    host_job(group);
    times_.host_seconds += std::chrono::duration<double>(HostWorker::Clock::now() - t0).count();
    ++times_.jobs;
  }
}

void Optimizer::host_job(int group) {
  using ordering::Lane;
  Group& g = groups_[group];
  ordering::OnThread lane(worker_ ? Lane::worker : Lane::launcher);
  if (worker_) ordering::await(&g.trace_submitted);
  g.landed.synchronize();
  ordering::host_waits(&g.landed);
  ordering::on_host("optimizer_host", {{"host_grad", group}}, {{"host_param", group}});
  bf16* const cast = cast_on_host_ ? g.host_kernel_weights.data() : nullptr;  // the bf16 copy, rounded here
  {
    compat::ScopedRegion region(HostExecSpace(), "optimizer_host");
    if (worker_) {
      // On the worker's threads: every run of the buffer (decayed or not) split into one chunk
      // per thread, through the same host loop as the inline path.
      AdamWConfig decayed_cfg = g.job_config, plain_cfg = g.job_config;
      decayed_cfg.weight_decay = settings_.weight_decay;
      plain_cfg.weight_decay = 0.0;
      auto const with_decay = detail::make_adamw_element<float>(decayed_cfg, g.job_step, g.scale);
      auto const without = detail::make_adamw_element<float>(plain_cfg, g.job_step, g.scale);
      detail::AdamWState<float> const in = g.job_in, out = g.job_out;
      bool const in_place = in.param == out.param;
      float const* grad = g.host_grad.data();
      std::size_t const threads = std::size_t(worker_->threads());
      worker_->parallel([&](int chunk) {
        for_each_run(g.decayed, g.host_grad.extent(0), [&](std::size_t begin, std::size_t end, bool decay) {
          std::size_t const per = (end - begin + threads - 1) / threads;
          std::size_t const b = std::min(end, begin + std::size_t(chunk) * per), e = std::min(end, b + per);
          if (b >= e) return;
          auto const& element = decay ? with_decay : without;
          if (in_place)
            detail::adamw_host_range(element, out.param, grad, out.m, out.v, b, e);
          else
            detail::adamw_host_range_into(element, detail::AdamWState<float const>{in.param, in.m, in.v}, grad, out, b, e);
          if (cast) round_to_bf16(cast, out.param, b, e);  // while the chunk is in cache
        });
      });
    } else {
      adamw_slices(HostExecSpace(), g.decayed, g.host_param, g.host_grad, g.host_m, g.host_v, g.job_config,
                   settings_.weight_decay, g.job_step, g.scale, settings_.host_threads);
      HostExecSpace().fence();
      if (cast) round_to_bf16(cast, g.host_param.data(), 0, g.host_param.extent(0));
    }
  }
  compat::ScopedRegion region(host_to_device_, "h2d");
  if constexpr (kDeviceIsHost) {
    // Host memory on both sides, and kernels complete when launched: a plain copy, made by the
    // thread that has the new weights (no Kokkos call from the worker thread). It follows the
    // compute instance's last read of the old weights (the group's backward pass), as below.
    // (In the trace "param" stands for what the kernels read: the weights, or their bf16 copy.)
    g.grad_final.synchronize();
    ordering::host_waits(&g.grad_final);
    if (cast) {
      std::memcpy(g.kernel_weights.data(), cast, g.kernel_weights.span() * sizeof(bf16));
      g.device_master_stale = true;
    } else {
      std::memcpy(g.param.data(), g.job_out.param, g.param.span() * sizeof(float));
      // The device's rounding, by the thread that has the weights (no Kokkos call from a worker).
      if (g.kernel_weights.data()) round_to_bf16(g.kernel_weights.data(), g.param.data(), 0, g.param.extent(0));
    }
    ordering::on_host("h2d", {{"host_param", group}}, {{"param", group}});
  } else {
    // After the compute instance's last read of the old weights (the backward pass of the group).
    g.grad_final.make_wait(host_to_device_);
    ordering::stream_waits(Lane::host_to_device, &g.grad_final);
    if (cast) {
      Kokkos::deep_copy(host_to_device_, g.kernel_weights, g.host_kernel_weights);
      g.device_master_stale = true;
    } else {
      // What the job wrote: the live weights, or the speculative ones (STV).
      Kokkos::View<float*, PinnedHostMemory, Kokkos::MemoryTraits<Kokkos::Unmanaged>> const out(g.job_out.param,
                                                                                             g.param.extent(0));
      Kokkos::deep_copy(host_to_device_, g.param, out);
      if (g.kernel_weights.data()) convert_precision(host_to_device_, g.kernel_weights, g.param);
    }
    ordering::on_stream(Lane::host_to_device, "h2d", {{"host_param", group}}, {{"param", group}});
    g.params_ready.record(host_to_device_);
    ordering::event_recorded(&g.params_ready, Lane::host_to_device);
  }

  if (worker_) ordering::signal(&g.trace_done);
}

void Optimizer::gradients_ready(int group) {
  if (group < 0 || group >= int(groups_.size())) return;
  // The backward pass has queued the group's last kernels: they read its weights, wrote its gradient.
  ordering::on_stream(ordering::Lane::compute, "backward", {{"param", group}}, {{"grad", group}});
  start_norm_part(group);
  if (!offloaded_[group]) return;
  wait_for_group(group);  // last step's job (normally already waited for by the forward pass)
  copy_gradient_to_host(group);
  // Without clipping the update needs nothing else: hand it over now, during the backward pass.
  // With clipping, as if none applied, into the next buffers (STV), if this process speculates.
  if (settings_.grad_clip <= 0) {
    hand_over(group, 1.0);
  } else if (speculative_ && !last_step_clipped_ && group != kLastReadyGroup) {
    groups_[group].speculating = true;
    ++times_.speculated;
    hand_over(group, 1.0);
  }
}

namespace {
// The sum of squares of `d` into the device scalar `out`, queued on `space` (no host wait).
template <class Out>
void queue_grad_norm_part(ExecSpace const& space, Tensor1<float, DeviceMemory> const& d, Out const& out) {
  detail::note_launch("grad_norm_part", detail::streaming_work(double(d.extent(0)), 4, 0, 2, 4, detail::WorkKind::optimizer),
                      d.extent(0));
  Kokkos::parallel_reduce(
      label("grad_norm_part"), Kokkos::RangePolicy<ExecSpace>(space, 0, d.extent(0)),
      KOKKOS_LAMBDA(int i, double& s) { s += double(d(i)) * double(d(i)); }, out);
}
}  // namespace

void Optimizer::start_norm_part(int group) {
  // Each group's sum of squares, on the device from the gradient buffer every group has, whatever
  // its placement: the norm (and so the clipping scale) does not depend on the offload ratio.
  if (norm_started_[group]) return;
  queue_grad_norm_part(compute_, groups_[group].grad, Kokkos::subview(norm_parts_, group));
  ordering::on_stream(ordering::Lane::compute, "grad_norm_part", {{"grad", group}}, {});
  norm_started_[group] = 1;
}

double Optimizer::gradient_norm() {
  for (std::size_t g = 0; g < groups_.size(); ++g) start_norm_part(int(g));
  Kokkos::deep_copy(compute_, norm_parts_host_, norm_parts_);
  compute_.fence();
  ordering::fence(ordering::Lane::compute);
  double sum = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) sum += norm_parts_host_(g);  // a fixed order
  return std::sqrt(sum);
}

void Optimizer::finish_step(double grad_scale) {
  detail::note_segment(detail::StepPart::update, -1);  // the one multi-tensor AdamW
  {
    // Every device group's tensors in one launch (on a CPU build, one parallel region).
    compat::ScopedRegion region(compute_, "optimizer_device");
    AdamWConfig decayed = adamw_config(), plain = adamw_config();
    decayed.weight_decay = settings_.weight_decay;
    plain.weight_decay = 0.0;
    adamw_update_runs(compute_, device_runs_, device_elements_, detail::make_adamw_element<float>(decayed, step_, grad_scale),
                      detail::make_adamw_element<float>(plain, step_, grad_scale));
  }
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    if (offloaded_[i]) continue;
    detail::note_segment(detail::StepPart::update, int(i));
    if (g.kernel_weights.data()) {  // the kernels' bf16 copy of the new weights
      compat::ScopedRegion region(compute_, "optimizer_device");
      detail::CountAs const in_optimizer(detail::WorkKind::optimizer);
      convert_precision(compute_, g.kernel_weights, g.param);
    }
    ordering::on_stream(ordering::Lane::compute, "optimizer_device", {{"grad", int(i)}}, {{"param", int(i)}});
  }
  // The jobs not handed over yet (with clipping and no speculation: all of them), in the order the
  // next forward pass needs their weights. A speculative job stands if nothing was clipped (the
  // scale is exactly 1, as it ran with); otherwise it is run again from the step's input, which
  // it left untouched. Either way its output becomes the live state.
  last_step_clipped_ = grad_scale != 1.0;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    if (!offloaded_[i]) continue;
    Group& g = groups_[i];
    if (!g.speculating) {
      hand_over(int(i), grad_scale);
      continue;
    }
    if (grad_scale != 1.0) {
      finish_job(int(i));
      ++times_.rolled_back;
      g.handed_over = false;
      hand_over(int(i), grad_scale);
    }
    std::swap(g.host_param, g.next_param);
    std::swap(g.host_m, g.next_m);
    std::swap(g.host_v, g.next_v);
    g.speculating = false;
  }
}

void Optimizer::abandon_step() {
  bool restored = false;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    if (!offloaded_[i] || !g.speculating) continue;
    finish_job(int(i));
    g.speculating = false;
    // The live state is as it was; the device got the speculative weights: copy the live ones.
    if (cast_on_host_) {
      round_to_bf16(g.host_kernel_weights.data(), g.host_param.data(), 0, g.host_param.extent(0));
      Kokkos::deep_copy(g.kernel_weights, g.host_kernel_weights);
    } else {
      Kokkos::deep_copy(g.param, g.host_param);
      if (g.kernel_weights.data()) convert_precision(compute_, g.kernel_weights, g.param);
    }
    restored = true;
  }
  if (restored) Kokkos::fence();
}

void Optimizer::wait_for_group(int group) {
  if (group < 0 || group >= int(groups_.size()) || !offloaded_[group]) return;
  Group& g = groups_[group];
  if (g.ordered) return;
  finish_job(group);
  g.params_ready.make_wait(compute_);
  ordering::stream_waits(ordering::Lane::compute, &g.params_ready);
  g.ordered = true;
}

void Optimizer::finish_job(int group) {
  if (!worker_) return;  // inline jobs are done when handed over
  Group& g = groups_[group];
  auto const t0 = HostWorker::Clock::now();
  worker_->wait(group);  // rethrows what the job threw
  ordering::await(&g.trace_done);
  times_.wait_seconds += std::chrono::duration<double>(HostWorker::Clock::now() - t0).count();
  auto const span = worker_->last_span(group);
  times_.host_seconds += std::chrono::duration<double>(span.end - span.start).count();
  ++times_.jobs;
}

void Optimizer::wait_all() {
  for (std::size_t i = 0; i < groups_.size(); ++i) wait_for_group(int(i));
  Kokkos::fence();
  // Cast on the host: the device's fp32 copy of offloaded groups is brought up to date here, for
  // what reads model.params (checkpoints, reconfiguration), not in the steps, which need only the
  // bf16 copy.
  for (auto& g : groups_)
    if (g.device_master_stale) {
      Kokkos::deep_copy(g.param, g.host_param);
      g.device_master_stale = false;
    }
  Kokkos::fence();
  for (auto lane : {ordering::Lane::compute, ordering::Lane::copies, ordering::Lane::host_to_device})
    ordering::fence(lane);
}

void Optimizer::reset_offload_times() {
  times_ = OffloadTimes{};
  times_.on_worker = worker_ != nullptr;
}

Optimizer::Moments Optimizer::moments() {
  wait_all();
  Moments out;
  auto to_host = [](auto const& view) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
    return std::vector<float>(h.data(), h.data() + h.extent(0));
  };
  for (auto const& g : groups_) {
    if (g.host_m.extent(0) > 0) {  // views of different memory spaces: no ?: between them
      out.m.push_back(to_host(g.host_m));
      out.v.push_back(to_host(g.host_v));
    } else {
      out.m.push_back(to_host(g.m));
      out.v.push_back(to_host(g.v));
    }
  }
  return out;
}

void Optimizer::set_moments(Moments const& moments) {
  wait_all();
  require(moments.m.size() == groups_.size() && moments.v.size() == groups_.size(), "Optimizer::set_moments",
          "moments for " + std::to_string(moments.m.size()) + " groups, the model has " + std::to_string(groups_.size()));
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    auto& g = groups_[i];
    auto from_host = [&](std::vector<float> const& values, auto const& view, char const* kind) {
      require(values.size() == view.extent(0), "Optimizer::set_moments",
              std::string(kind) + " of group " + g.name + " has the wrong size");
      auto h = Kokkos::create_mirror_view(view);
      std::copy(values.begin(), values.end(), h.data());
      Kokkos::deep_copy(view, h);
    };
    if (g.host_m.extent(0) > 0) {
      from_host(moments.m[i], g.host_m, "m");
      from_host(moments.v[i], g.host_v, "v");
    } else {
      from_host(moments.m[i], g.m, "m");
      from_host(moments.v[i], g.v, "v");
    }
  }
  Kokkos::fence();
}

void Optimizer::save(io::H5File& f) {
  auto const state = moments();
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    f.write("/adam_m/" + groups_[i].name, state.m[i].data(), {state.m[i].size()});
    f.write("/adam_v/" + groups_[i].name, state.v[i].data(), {state.v[i].size()});
  }
}

void Optimizer::load(io::H5File const& f) {
  Moments state;
  for (auto const& g : groups_) {
    std::size_t const n = g.param.extent(0);
    for (auto [kind, out] : {std::pair<char const*, std::vector<std::vector<float>>*>{"adam_m", &state.m},
                             {"adam_v", &state.v}}) {
      io::Dims dims;
      out->push_back(f.read<float>(std::string("/") + kind + "/" + g.name, &dims));
      require(dims.size() == 1 && dims[0] == n, "Optimizer::load", f.path() + ": /" + kind + "/" + g.name + " has the wrong size");
    }
  }
  set_moments(state);
}

}  // namespace joule
