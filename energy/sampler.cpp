#include "energy/sampler.hpp"

#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <set>

namespace joule::energy {

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Sampler::Sampler(std::vector<std::unique_ptr<Source>> sources, double rate_hz)
    : sources_(std::move(sources)), rate_hz_(rate_hz > 0 ? rate_hz : 20.0), t0_(steady_seconds()) {
  for (auto const& s : sources_)
    for (auto const& c : s->channels()) channels_.push_back({s->name(), c});
  std::size_t const n = channels_.size();
  last_value_.assign(n, std::nan(""));
  energy_.assign(n, 0.0);
  counter_start_.assign(n, 0.0);
  counter_started_.assign(n, false);
  for (std::size_t i = 0; i < n; ++i)
    if (channels_[i].channel.quantity == Quantity::gauge) energy_[i] = std::nan("");
}

Sampler::~Sampler() { stop(); }

std::vector<Source const*> Sampler::sources() const {
  std::vector<Source const*> out;
  for (auto const& s : sources_) out.push_back(s.get());
  return out;
}

double Sampler::now() const { return steady_seconds() - t0_; }

void Sampler::sample_locked(double t, bool record) {
  std::vector<double> values;
  values.reserve(channels_.size());
  for (auto& s : sources_) {
    s->read(scratch_);
    values.insert(values.end(), scratch_.begin(), scratch_.end());
  }
  double const dt = have_last_ && t > last_t_ ? t - last_t_ : 0.0;
  TracePoint point{t, std::vector<double>(channels_.size(), std::nan(""))};
  for (std::size_t i = 0; i < channels_.size(); ++i) {
    double const v = values[i];
    switch (channels_[i].channel.quantity) {
      case Quantity::energy_counter:
        if (std::isnan(v)) break;  // sensor lost: energy stays where it was
        if (!counter_started_[i]) {
          counter_start_[i] = v;
          counter_started_[i] = true;
        }
        if (dt > 0 && !std::isnan(last_value_[i])) point.values[i] = (v - last_value_[i]) / dt;
        energy_[i] = v - counter_start_[i];
        last_value_[i] = v;
        break;
      case Quantity::power:
        if (std::isnan(v)) {
          last_value_[i] = std::nan("");
          break;
        }
        if (dt > 0 && !std::isnan(last_value_[i])) energy_[i] += 0.5 * (last_value_[i] + v) * dt;
        last_value_[i] = v;
        point.values[i] = v;
        break;
      case Quantity::gauge:
        point.values[i] = v;
        break;
    }
  }
  have_last_ = true;
  if (t > last_t_) last_t_ = t;
  if (record) trace_.push_back(std::move(point));
}

std::vector<double> Sampler::snapshot(double at) {
  std::lock_guard<std::mutex> lock(mutex_);
  double const t = at >= 0 ? at : now();
  // A snapshot is a sample, but only periodic samples go into the trace (so that a run with
  // many short regions does not grow the trace without bound).
  sample_locked(t, /*record=*/at >= 0 || !running_);
  return energy_;
}

std::vector<TracePoint> Sampler::trace() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return trace_;
}

std::vector<std::string> Sampler::notes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (auto const& s : sources_) out.insert(out.end(), s->notes().begin(), s->notes().end());
  return out;
}

void Sampler::start() {
  if (running_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sample_locked(now(), true);
  }
  thread_ = std::thread([this] { run(); });
}

void Sampler::run() {
  auto const period = std::chrono::duration<double>(1.0 / rate_hz_);
  auto next = std::chrono::steady_clock::now();
  while (running_) {
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
    std::this_thread::sleep_until(next);
    if (!running_) break;
    std::lock_guard<std::mutex> lock(mutex_);
    sample_locked(now(), true);
  }
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  thread_cpu_seconds_ = ts.tv_sec + ts.tv_nsec * 1e-9;
}

void Sampler::stop() {
  if (!running_.exchange(false)) return;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  sample_locked(now(), true);
}

TotalRule total_rule(std::vector<Sampler::ChannelInfo> const& channels) {
  // A domain can be read by two sources (module power from NVML and from hwmon): they measure
  // the same thing, so only the first (most preferred) source's channels of a domain count.
  auto pick = [&](std::set<std::string> const& domains) {
    std::vector<std::size_t> idx;
    std::map<std::string, std::string> source_of;
    for (std::size_t i = 0; i < channels.size(); ++i) {
      auto const& c = channels[i];
      if (c.channel.quantity == Quantity::gauge || !domains.count(c.channel.domain)) continue;
      auto const [it, first] = source_of.emplace(c.channel.domain, c.source);
      if (first || it->second == c.source) idx.push_back(i);
    }
    return idx;
  };
  auto has = [&](char const* d) { return !pick({d}).empty(); };
  TotalRule r;
  if (has(kDomainModule)) {
    r.channels = pick({kDomainModule});
    r.description = "module (Grace Hopper module power: GPU + CPU + memory)";
  } else if (has(kDomainGpu) && has(kDomainPackage)) {
    r.channels = pick({kDomainGpu, kDomainPackage});
    r.description = "gpu + package (NVIDIA GPU and CPU packages)";
  } else if (has(kDomainPackage)) {
    r.channels = pick({kDomainPackage});
    r.description = "package (CPU packages, RAPL)";
  } else if (has(kDomainGpu)) {
    r.channels = pick({kDomainGpu});
    r.description = "gpu (the CPU could not be measured)";
  } else {
    r.channels = pick({kDomainModel});
    r.description = "model (CPU-time estimate: nothing could be measured)";
  }
  r.measured = !r.channels.empty();
  for (auto i : r.channels) r.measured = r.measured && channels[i].channel.measured;
  return r;
}

}  // namespace joule::energy
