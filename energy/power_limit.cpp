#include "energy/power_limit.hpp"

#include "energy/detail/dl_symbol.hpp"
#include "energy/detail/nvml_select.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>

namespace joule::energy {

struct PowerLimiter::Impl {
  using Return = int;
  using Device = void*;
  void* handle = nullptr;
  Return (*init)() = nullptr;
  Return (*shutdown)() = nullptr;
  Return (*device_count)(unsigned*) = nullptr;
  Return (*device_handle)(unsigned, Device*) = nullptr;
  Return (*get_limit)(Device, unsigned*) = nullptr;
  Return (*get_constraints)(Device, unsigned*, unsigned*) = nullptr;
  Return (*set_limit)(Device, unsigned) = nullptr;
  char const* (*error_string)(Return) = nullptr;

  std::string error(Return r) const { return error_string ? error_string(r) : "NVML error " + std::to_string(r); }
  ~Impl() {
    if (handle) {
      if (shutdown) shutdown();
      dlclose(handle);
    }
  }
};

PowerLimiter::PowerLimiter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<PowerLimiter> PowerLimiter::open(SourceOptions const& options) {
  if (options.nvml_library == "none") throw PowerLimitError("GPU power limits need NVML, which is disabled (JOULE_NVML_LIBRARY=none)");
  auto impl = std::make_unique<Impl>();
  impl->handle = dlopen(options.nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!impl->handle)
    throw PowerLimitError("GPU power limits need NVML: cannot load " + options.nvml_library + " (no NVIDIA driver here?)");
  bool const complete = detail::bind_symbol(impl->handle, "nvmlInit_v2", impl->init) &&
                        detail::bind_symbol(impl->handle, "nvmlShutdown", impl->shutdown) &&
                        detail::bind_symbol(impl->handle, "nvmlDeviceGetCount_v2", impl->device_count) &&
                        detail::bind_symbol(impl->handle, "nvmlDeviceGetHandleByIndex_v2", impl->device_handle) &&
                        detail::bind_symbol(impl->handle, "nvmlDeviceGetPowerManagementLimit", impl->get_limit) &&
                        detail::bind_symbol(impl->handle, "nvmlDeviceGetPowerManagementLimitConstraints", impl->get_constraints) &&
                        detail::bind_symbol(impl->handle, "nvmlDeviceSetPowerManagementLimit", impl->set_limit);
  detail::bind_symbol(impl->handle, "nvmlErrorString", impl->error_string);
  if (!complete) throw PowerLimitError(options.nvml_library + " lacks the NVML power-limit functions");
  if (int const r = impl->init(); r != 0) throw PowerLimitError("NVML init failed: " + impl->error(r));
  std::unique_ptr<PowerLimiter> p(new PowerLimiter(std::move(impl)));
  auto const& n = *p->impl_;
  // The same device the energy source reads (nvml_select.hpp): this process's GPU, never another's.
  auto const devices = detail::list_nvml_devices(n.handle, options.cuda_visible_devices);
  auto const choice = detail::choose_nvml_devices(options, devices);
  if (!choice.error.empty()) throw PowerLimitError("no GPU for this process to limit: " + choice.error);
  for (unsigned g : choice.indices) {
    Device d{};
    d.index = g;
    if (int const r = n.device_handle(g, &d.handle); r != 0)
      throw PowerLimitError("GPU " + std::to_string(g) + ": " + n.error(r));
    if (int const r = n.get_limit(d.handle, &d.original_mw); r != 0)
      throw PowerLimitError("GPU " + std::to_string(g) + ": cannot read its power limit: " + n.error(r));
    if (int const r = n.get_constraints(d.handle, &d.min_mw, &d.max_mw); r != 0)
      throw PowerLimitError("GPU " + std::to_string(g) + ": cannot read its power-limit range: " + n.error(r));
    p->devices_.push_back(d);
  }
  return p;
}

PowerLimiter::~PowerLimiter() {
  try {
    restore();
  } catch (...) {  // a destructor must not throw; restore() already tried every GPU
  }
}

std::vector<unsigned> PowerLimiter::nvml_indices() const {
  std::vector<unsigned> out;
  for (auto const& d : devices_) out.push_back(d.index);
  return out;
}

double PowerLimiter::original_watts() const { return devices_.front().original_mw * 1e-3; }
double PowerLimiter::min_watts() const {
  unsigned mw = 0;
  for (auto const& d : devices_) mw = std::max(mw, d.min_mw);
  return mw * 1e-3;
}
double PowerLimiter::max_watts() const {
  unsigned mw = ~0u;
  for (auto const& d : devices_) mw = std::min(mw, d.max_mw);
  return mw * 1e-3;
}

void PowerLimiter::set(double watts) {
  if (watts <= 0) return restore();
  if (watts < min_watts() || watts > max_watts())
    throw PowerLimitError("power limit " + std::to_string(int(watts)) + " W is outside what the GPU allows [" +
                          std::to_string(int(min_watts())) + ", " + std::to_string(int(max_watts())) + "] W");
  for (auto& d : devices_) {
    auto const mw = unsigned(std::lround(watts * 1e3));
    if (int const r = impl_->set_limit(d.handle, mw); r != 0)
      throw PowerLimitError("setting the GPU power limit to " + std::to_string(int(watts)) + " W failed: " + impl_->error(r) +
                            " (it needs root or the driver's permission; leave tune.power_limits_w out to never touch it)");
    d.changed = true;
  }
}

void PowerLimiter::restore() {
  std::string failed;
  for (auto& d : devices_) {
    if (!d.changed) continue;
    if (int const r = impl_->set_limit(d.handle, d.original_mw); r != 0)
      failed += (failed.empty() ? "" : "; ") + impl_->error(r);
    else
      d.changed = false;
  }
  if (!failed.empty()) throw PowerLimitError("could not restore the original GPU power limit: " + failed);
}

}  // namespace joule::energy
