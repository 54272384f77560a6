#include "energy/detail/bounded_read.hpp"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace joule::energy::detail {

namespace {

FileRead read_now(std::string const& path) {
  FileRead r;
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) {
    r.error = errno;
    return r;
  }
  char buf[256];
  std::size_t const n = std::fread(buf, 1, sizeof(buf) - 1, f);
  bool const failed = std::ferror(f);
  r.error = failed ? errno : 0;
  std::fclose(f);
  if (failed) return r;
  r.text.assign(buf, n);
  while (!r.text.empty() && (r.text.back() == '\n' || r.text.back() == ' ')) r.text.pop_back();
  r.ok = true;
  return r;
}

struct Job {
  std::string path;
  FileRead result;
  bool done = false;
};

// One helper thread and the job in its hands. Shared with the thread, which may outlive the
// reader's interest in it (retired: it ends after the read it is stuck in, if that ever returns).
struct Worker {
  std::mutex mutex;
  std::condition_variable changed;
  std::shared_ptr<Job> job;
  bool retired = false;
};

void work(std::shared_ptr<Worker> w) {
  std::unique_lock<std::mutex> lock(w->mutex);
  for (;;) {
    w->changed.wait(lock, [&] { return w->retired || (w->job && !w->job->done); });
    if (w->retired) return;
    auto const job = w->job;
    lock.unlock();
    FileRead r = read_now(job->path);
    lock.lock();
    job->result = std::move(r);
    job->done = true;
    w->changed.notify_all();
  }
}

struct Reader {
  std::mutex one_at_a_time;
  std::shared_ptr<Worker> worker;
  std::set<std::string> stalled;
};

// Never destroyed: a detached worker may still be blocked in a read when the process exits.
Reader& reader() {
  static Reader* const r = new Reader;
  return *r;
}

}  // namespace

FileRead read_file_within(std::string const& path, double deadline_s) {
  Reader& r = reader();
  std::lock_guard<std::mutex> call(r.one_at_a_time);
  FileRead timed_out;
  timed_out.error = ETIMEDOUT;
  if (r.stalled.count(path)) return timed_out;
  if (!r.worker) {
    r.worker = std::make_shared<Worker>();
    std::thread(work, r.worker).detach();
  }
  auto const w = r.worker;
  auto const job = std::make_shared<Job>();
  job->path = path;
  std::unique_lock<std::mutex> lock(w->mutex);
  w->job = job;
  w->changed.notify_all();
  if (w->changed.wait_for(lock, std::chrono::duration<double>(deadline_s), [&] { return job->done; }))
    return job->result;
  w->retired = true;  // stuck in this read: the next read gets a new thread
  lock.unlock();
  r.worker.reset();
  r.stalled.insert(path);
  return timed_out;
}

bool read_stalled(std::string const& path) {
  Reader& r = reader();
  std::lock_guard<std::mutex> call(r.one_at_a_time);
  return r.stalled.count(path) > 0;
}

}  // namespace joule::energy::detail
