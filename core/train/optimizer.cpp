#include "core/train/optimizer.hpp"

#include "core/io/h5file.hpp"

#include <algorithm>
#include <cmath>

namespace joule {

std::vector<bool> choose_offloaded_groups(std::vector<std::size_t> const& sizes, double ratio) {
  require(ratio >= 0.0 && ratio <= 1.0, "choose_offloaded_groups",
          "offload_ratio must be in [0, 1], got " + std::to_string(ratio));
  std::size_t total = 0;
  for (auto s : sizes) total += s;
  double const target = ratio * double(total);
  std::vector<bool> chosen(sizes.size(), false);
  double taken = 0;
  // Backward-completion order: last group (head) first, then blocks from the last, then embed.
  for (std::size_t k = sizes.size(); k-- > 0;) {
    double const with = taken + double(sizes[k]);
    if (std::abs(with - target) < std::abs(taken - target)) {
      chosen[k] = true;
      taken = with;
    }
  }
  return chosen;
}

std::vector<std::size_t> parameter_group_sizes(ModelConfig const& m) {
  std::size_t const C = m.d_model, M = m.mlp_hidden(), V = m.vocab(), S = m.seq_len(), Fp = m.patch_features();
  std::vector<std::size_t> sizes{C * Fp + C + S * C + V * C};
  for (int l = 0; l < m.layers; ++l) sizes.push_back(4 * C + 3 * C * C + 3 * C + C * C + C + M * C + M + C * M + C);
  sizes.push_back(2 * C + (m.tie_embeddings ? 0 : V * C));
  return sizes;
}

OptimizerMemory estimate_optimizer_memory(ModelConfig const& m, double offload_ratio) {
  auto const sizes = parameter_group_sizes(m);
  auto const chosen = choose_offloaded_groups(sizes, offload_ratio);
  OptimizerMemory r;
  std::size_t total = 0, host = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    total += sizes[i];
    if (chosen[i]) host += sizes[i];
  }
  r.device = 2 * (total - host) * sizeof(float);
  r.host = 4 * host * sizeof(float);
  r.achieved_ratio = total ? double(host) / total : 0.0;
  return r;
}

Optimizer::Optimizer(Model& model, OptimizerSettings const& settings)
    : model_(model), settings_(settings), compute_(), copies_(compat::independent_instance<ExecSpace>()) {
  model_.params.for_each_group([&](std::string const& name, auto const& storage) {
    Group g;
    g.name = name;
    g.param = storage;
    groups_.push_back(g);
    names_.push_back(name);
  });
  std::size_t k = 0;
  model_.grads.for_each_group([&](std::string const&, auto const& storage) { groups_[k++].grad = storage; });
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
  std::size_t total = 0, host = 0;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    std::size_t const n = g.param.extent(0);
    total += n;
    if (offloaded_[i]) {
      host += n;
      g.host_param = Tensor1<float, HostStateMemory>(label(("host.param." + g.name).c_str()), n);
      g.host_grad = Tensor1<float, HostStateMemory>(label(("host.grad." + g.name).c_str()), n);
      g.host_m = Tensor1<float, HostStateMemory>(label(("host.adam_m." + g.name).c_str()), n);
      g.host_v = Tensor1<float, HostStateMemory>(label(("host.adam_v." + g.name).c_str()), n);
    } else {
      g.m = Tensor1<float, DeviceMemory>(label(("adam_m." + g.name).c_str()), n);
      g.v = Tensor1<float, DeviceMemory>(label(("adam_v." + g.name).c_str()), n);
    }
  }
  achieved_ratio_ = total ? double(host) / double(total) : 0.0;
  norm_parts_ = Kokkos::View<double*, DeviceMemory>(label("optimizer.norm_parts"), groups_.size());
  norm_parts_host_ = Kokkos::create_mirror_view(norm_parts_);
  norm_started_.assign(groups_.size(), 0);
}

std::size_t Optimizer::device_state_bytes() const {
  std::size_t b = 0;
  for (auto const& g : groups_) b += (g.m.extent(0) + g.v.extent(0)) * sizeof(float);
  return b;
}

std::size_t Optimizer::host_state_bytes() const {
  std::size_t b = 0;
  for (auto const& g : groups_)
    b += (g.host_param.extent(0) + g.host_grad.extent(0) + g.host_m.extent(0) + g.host_v.extent(0)) * sizeof(float);
  return b;
}

void Optimizer::sync_master_weights() {
  for (auto& g : groups_)
    if (g.host_param.extent(0)) Kokkos::deep_copy(g.host_param, g.param);
}

void Optimizer::begin_step(double lr, long step) {
  lr_ = lr;
  step_ = step;
  for (auto& g : groups_) g.copied = g.updated = false;
  std::fill(norm_started_.begin(), norm_started_.end(), 0);
}

namespace {
template <class Space, class P, class G, class M>
void adamw_slices(Space const& space, std::vector<std::pair<std::size_t, std::size_t>> const& decayed,
                  P const& p, G const& g, M const& m, M const& v, AdamWConfig cfg, double weight_decay,
                  long step, double scale, int threads) {
  // Runs of the buffer alternate between decayed (matrices) and not decayed.
  std::size_t const n = p.extent(0);
  std::size_t pos = 0;
  auto run = [&](std::size_t begin, std::size_t end, double wd) {
    if (begin >= end) return;
    auto const r = std::make_pair(begin, end);
    cfg.weight_decay = wd;
    adamw_update(space, Kokkos::subview(p, r), Kokkos::subview(g, r), Kokkos::subview(m, r),
                 Kokkos::subview(v, r), cfg, step, scale, threads);
  };
  for (auto const& [b, e] : decayed) {
    run(pos, b, 0.0);
    run(b, e, weight_decay);
    pos = e;
  }
  run(pos, n, 0.0);
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

void Optimizer::copy_gradient_to_host(Group& g) {
  if (g.copied) return;
  // Copies run on their own instance: the gradient must be final on the compute instance first.
  compute_.fence();
  compat::ScopedRegion region("d2h");
  Kokkos::deep_copy(copies_, g.host_grad, g.grad);
  g.copied = true;
}

void Optimizer::update_host(Group& g, double grad_scale) {
  copy_gradient_to_host(g);
  copies_.fence();  // the gradient has landed
  {
    compat::ScopedRegion region("optimizer_host");
    adamw_slices(HostExecSpace(), g.decayed, g.host_param, g.host_grad, g.host_m, g.host_v,
                 adamw_config(), settings_.weight_decay, step_, grad_scale, settings_.host_threads);
    HostExecSpace().fence();
  }
  {
    compat::ScopedRegion region("h2d");
    Kokkos::deep_copy(copies_, g.param, g.host_param);  // waits in finish_step
  }
  g.updated = true;
}

void Optimizer::gradients_ready(int group) {
  if (group < 0 || group >= int(groups_.size())) return;
  start_norm_part(group);
  if (!offloaded_[group]) return;
  Group& g = groups_[group];
  copy_gradient_to_host(g);
  // Without clipping the update needs nothing else: do it now, during the backward pass.
  if (settings_.grad_clip <= 0) update_host(g, 1.0);
}

void Optimizer::start_norm_part(int group) {
  // Each group's sum of squares, on the device from the gradient buffer every group has, whatever
  // its placement: the norm (and so the clipping scale) does not depend on the offload ratio.
  if (norm_started_[group]) return;
  auto const d = groups_[group].grad;
  Kokkos::parallel_reduce(
      label("grad_norm_part"), Kokkos::RangePolicy<ExecSpace>(compute_, 0, d.extent(0)),
      KOKKOS_LAMBDA(int i, double& s) { s += double(d(i)) * double(d(i)); }, Kokkos::subview(norm_parts_, group));
  norm_started_[group] = 1;
}

double Optimizer::gradient_norm() {
  for (std::size_t g = 0; g < groups_.size(); ++g) start_norm_part(int(g));
  Kokkos::deep_copy(compute_, norm_parts_host_, norm_parts_);
  compute_.fence();
  double sum = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) sum += norm_parts_host_(g);  // a fixed order
  return std::sqrt(sum);
}

void Optimizer::finish_step(double grad_scale) {
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    if (offloaded_[i]) {
      if (!g.updated) update_host(g, grad_scale);
      continue;
    }
    compat::ScopedRegion region("optimizer_device");
    adamw_slices(compute_, g.decayed, g.param, g.grad, g.m, g.v, adamw_config(), settings_.weight_decay,
                 step_, grad_scale, 0);
  }
  compute_.fence();
  copies_.fence();  // every host -> device copy is complete before the next forward pass
}

void Optimizer::save(io::H5File& f) const {
  for (auto const& g : groups_) {
    auto write = [&](char const* kind, auto const& view) {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
      f.write(std::string("/") + kind + "/" + g.name, h.data(), {h.extent(0)});
    };
    if (g.host_m.extent(0)) {
      write("adam_m", g.host_m);
      write("adam_v", g.host_v);
    } else {
      write("adam_m", g.m);
      write("adam_v", g.v);
    }
  }
}

void Optimizer::load(io::H5File const& f) {
  for (auto& g : groups_) {
    auto read = [&](char const* kind, auto const& view) {
      io::Dims dims;
      auto const values = f.read<float>(std::string("/") + kind + "/" + g.name, &dims);
      require(dims.size() == 1 && dims[0] == view.extent(0), "Optimizer::load",
              f.path() + ": /" + kind + "/" + g.name + " has the wrong size");
      auto h = Kokkos::create_mirror_view(view);
      std::copy(values.begin(), values.end(), h.data());
      Kokkos::deep_copy(view, h);
    };
    if (g.host_m.extent(0)) {
      read("adam_m", g.host_m);
      read("adam_v", g.host_v);
    } else {
      read("adam_m", g.m);
      read("adam_v", g.v);
    }
  }
}

}  // namespace joule
