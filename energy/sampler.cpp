#include "energy/sampler.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <stdexcept>

namespace joule::energy {

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double const kNaN = std::nan("");
}  // namespace

Sampler::Sampler(std::vector<std::unique_ptr<Source>> sources, double rate_hz)
    : sources_(std::move(sources)), rate_hz_(rate_hz > 0 ? rate_hz : kDefaultRateHz), t0_(steady_seconds()) {
  for (auto const& s : sources_)
    for (auto const& c : s->channels()) channels_.push_back({s->name(), c});
  std::size_t const n = channels_.size();
  last_value_.assign(n, kNaN);
  energy_.assign(n, 0.0);
  counter_start_.assign(n, 0.0);
  counter_started_.assign(n, false);
  for (std::size_t i = 0; i < n; ++i)
    if (channels_[i].channel.quantity == Quantity::gauge) energy_[i] = kNaN;
  // A day at 100 Hz is 8.6 M samples; reserve a minute's worth so that short runs never regrow.
  times_.reserve(std::size_t(60 * rate_hz_));
  watts_.reserve(std::size_t(60 * rate_hz_) * n);
  joules_.reserve(std::size_t(60 * rate_hz_) * n);
  detail::ForkGuard::add(mutex_);
}

Sampler::~Sampler() {
  stop();
  detail::ForkGuard::remove(mutex_);
}

namespace detail {
// A fork (joule reads untrusted HDF5 files in a forked child, core/io/h5file.cpp) copies only the
// forking thread: a sampler thread caught inside sample_locked, where its trace grows, could hold
// the allocator's lock (ASan's in GCC 12 has no fork handler), and the child's first allocation
// would wait for it for ever. Every live sampler's mutex is taken around fork(), so no sampler is
// mid-sample then; released in the parent and in the child.
namespace {
std::mutex g_fork_registry;
std::set<std::mutex*>& fork_mutexes() {
  static std::set<std::mutex*> mutexes;
  return mutexes;
}
void fork_prepare() {
  g_fork_registry.lock();
  for (auto* m : fork_mutexes()) m->lock();
}
void fork_release() {
  for (auto* m : fork_mutexes()) m->unlock();
  g_fork_registry.unlock();
}
}  // namespace

void ForkGuard::add(std::mutex& m) {
  static bool const installed = pthread_atfork(fork_prepare, fork_release, fork_release) == 0;
  (void)installed;
  std::lock_guard<std::mutex> lock(g_fork_registry);
  fork_mutexes().insert(&m);
}

void ForkGuard::remove(std::mutex& m) {
  std::lock_guard<std::mutex> lock(g_fork_registry);
  fork_mutexes().erase(&m);
}
}  // namespace detail

std::vector<Source const*> Sampler::sources() const {
  std::vector<Source const*> out;
  for (auto const& s : sources_) out.push_back(s.get());
  return out;
}

double Sampler::now() const { return steady_seconds() - t0_; }

double Sampler::resolution_s(std::size_t channel) const {
  return std::max(1.0 / rate_hz_, channels_.at(channel).channel.resolution_s);
}

void Sampler::sample_locked(double t) {
  std::size_t const n = channels_.size();
  values_.clear();
  for (auto& s : sources_) {
    s->read(scratch_);
    values_.insert(values_.end(), scratch_.begin(), scratch_.end());
  }
  if (!times_.empty() && t <= times_.back()) t = std::nextafter(times_.back(), 1e300);  // strictly increasing
  double const dt = times_.empty() ? 0.0 : t - times_.back();
  std::size_t const row = times_.size() * n;
  times_.push_back(t);
  watts_.resize(row + n, kNaN);
  joules_.resize(row + n, kNaN);
  for (std::size_t i = 0; i < n; ++i) {
    double const v = values_[i];
    double& w = watts_[row + i];
    switch (channels_[i].channel.quantity) {
      case Quantity::energy_counter:
        if (std::isnan(v)) break;  // sensor lost: energy stays where it was
        if (!counter_started_[i]) {
          counter_start_[i] = v;
          counter_started_[i] = true;
        }
        if (dt > 0 && !std::isnan(last_value_[i])) w = (v - last_value_[i]) / dt;
        energy_[i] = v - counter_start_[i];
        last_value_[i] = v;
        break;
      case Quantity::power:
        if (std::isnan(v)) {
          last_value_[i] = kNaN;
          break;
        }
        if (dt > 0 && !std::isnan(last_value_[i])) energy_[i] += 0.5 * (last_value_[i] + v) * dt;
        last_value_[i] = v;
        w = v;
        break;
      case Quantity::gauge:
        w = v;
        break;
    }
    joules_[row + i] = energy_[i];
  }
  sampled_.notify_all();
}

std::vector<double> Sampler::snapshot(double at) {
  if (running_)
    throw std::logic_error("joule::energy::Sampler::snapshot: the sampler thread is the only reader of sensors "
                           "while it runs; compute energy from the trace (energy_between)");
  std::lock_guard<std::mutex> lock(mutex_);
  sample_locked(at >= 0 ? at : now());
  return energy_;
}

std::size_t Sampler::first_at_or_after(double t) const {
  return std::size_t(std::lower_bound(times_.begin(), times_.end(), t) - times_.begin());
}

void Sampler::add_energy(std::size_t channel, std::vector<std::pair<double, double>> const& intervals,
                         std::vector<double>& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t const n = channels_.size();
  Quantity const q = channels_.at(channel).channel.quantity;
  // Cumulative energy at time t. Between samples s-1 and s: a counter's power is constant (its
  // difference over the period); a power reading is linear between the two readings.
  auto cumulative = [&](double t) {
    // Before the first sample nothing was measured: an interval that began earlier counts from it.
    if (times_.empty() || t > times_.back()) return kNaN;
    t = std::max(t, times_.front());
    std::size_t s = first_at_or_after(t);
    if (times_[s] == t || s == 0) return joules_[s * n + channel];
    double const ta = times_[s - 1], tb = times_[s], ea = joules_[(s - 1) * n + channel],
                 eb = joules_[s * n + channel];
    if (q == Quantity::energy_counter) return ea + (eb - ea) * (t - ta) / (tb - ta);
    double const pa = watts_[(s - 1) * n + channel], pb = watts_[s * n + channel];
    if (std::isnan(pa) || std::isnan(pb)) return ea + (eb - ea) * (t - ta) / (tb - ta);
    double const x = t - ta;
    return ea + pa * x + 0.5 * (pb - pa) * x * x / (tb - ta);
  };
  if (out.size() < intervals.size()) out.resize(intervals.size(), 0.0);
  for (std::size_t i = 0; i < intervals.size(); ++i) {
    if (q == Quantity::gauge) {
      out[i] = kNaN;
      continue;
    }
    out[i] += cumulative(intervals[i].second) - cumulative(intervals[i].first);
  }
}

double Sampler::energy_between(std::size_t channel, double t0, double t1) const {
  std::vector<double> e;
  add_energy(channel, {{t0, t1}}, e);
  return e[0];
}

double Sampler::covered_until() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return times_.empty() ? -1.0 : times_.back();
}

void Sampler::wait_until_covered(double t) {
  if (!running_) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (times_.empty() || times_.back() < t) sample_locked(std::max(t, now()));
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  sampled_.wait(lock, [&] { return (!times_.empty() && times_.back() >= t) || !running_; });
  if (times_.empty() || times_.back() < t) sample_locked(std::max(t, now()));  // stopped meanwhile
}

std::vector<TracePoint> Sampler::trace(double t0, double t1) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t const n = channels_.size();
  std::vector<TracePoint> out;
  for (std::size_t s = first_at_or_after(t0); s < times_.size() && times_[s] <= t1; ++s)
    out.push_back({times_[s], std::vector<double>(watts_.begin() + s * n, watts_.begin() + (s + 1) * n)});
  return out;
}

std::vector<std::string> Sampler::notes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (auto const& s : sources_) out.insert(out.end(), s->notes().begin(), s->notes().end());
  return out;
}

void Sampler::start() {
  if (running_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sample_locked(now());
  }
  running_ = true;
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
    sample_locked(now());
  }
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  thread_cpu_seconds_ = ts.tv_sec + ts.tv_nsec * 1e-9;
}

void Sampler::stop() {
  if (!running_.exchange(false)) return;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  sample_locked(now());
}

TotalRule total_rule(std::vector<Sampler::ChannelInfo> const& channels) {
  // A domain can be read by two sources (module power from NVML and from hwmon): they measure
  // the same thing, so only the first (most preferred) source's channels of a domain count.
  auto pick = [&](std::set<std::string> const& domains) {
    std::vector<std::size_t> idx;
    std::map<std::string, std::string> source_of;
    for (std::size_t i = 0; i < channels.size(); ++i) {
      auto const& c = channels[i];
      if (c.channel.quantity == Quantity::gauge || !c.channel.counted_elsewhere.empty() ||
          !domains.count(c.channel.domain))
        continue;
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
    if (r.channels.size() > 1)  // hwmon's meters, one per superchip: every GPU of the node is in them
      r.description = "module (Grace Hopper module power: GPU + CPU + memory, " + std::to_string(r.channels.size()) +
                      " superchips: the node's other ranks count none of it)";
  } else if (has(kDomainGpu) && has(kDomainPackage)) {
    r.channels = pick({kDomainGpu, kDomainPackage});
    r.description = "gpu + package (NVIDIA GPU and CPU packages)";
  } else if (has(kDomainPackage)) {
    r.channels = pick({kDomainPackage});
    r.description = "package (CPU packages, RAPL)";
  } else if (has(kDomainGpu)) {
    r.channels = pick({kDomainGpu});
    r.description = "gpu (the CPU could not be measured)";
  } else if (auto const elsewhere = std::find_if(channels.begin(), channels.end(), [](auto const& c) {
               return !c.channel.counted_elsewhere.empty();
             });
             elsewhere != channels.end() && !has(kDomainModel)) {
    // Everything this process measures another process of the node counts: its share is there.
    r.description = "none in this process: its " + elsewhere->channel.domain + " is " +
                    elsewhere->channel.counted_elsewhere;
    r.measured = true;
    return r;
  } else {
    r.channels = pick({kDomainModel});
    r.description = "model (CPU-time estimate: nothing could be measured)";
  }
  r.measured = !r.channels.empty();
  for (auto i : r.channels) r.measured = r.measured && channels[i].channel.measured;
  return r;
}

}  // namespace joule::energy
