#pragma once
// A small RAII wrapper over the HDF5 C API: the one place in joule that talks to libhdf5.
// Datasets, checkpoints and (later) the tuning log go through it. Every failure throws H5Error
// naming the file and the object, and reading checks the stored element type, so a malformed
// file gives a message instead of garbage.
#include "core/io/input_file.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::io {

class H5Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Dims = std::vector<std::size_t>;

class H5File {
 public:
  enum class Mode { read, read_write, truncate };
  H5File(std::string const& path, Mode mode);
  // Reads a file opened once (io::InputFile, open_input): HDF5 opens its proc_path(), the inode the
  // descriptor holds, and where that is the path (no /proc) the file HDF5 opened is checked to be
  // that inode. Messages name in.path().
  explicit H5File(InputFile const& in);
  ~H5File();
  H5File(H5File&& other) noexcept;
  H5File& operator=(H5File&& other) noexcept;
  H5File(H5File const&) = delete;
  H5File& operator=(H5File const&) = delete;

  std::string const& path() const { return path_; }
  bool exists(std::string const& object) const;  // nested paths allowed ("a/b/c")
  void create_group(std::string const& group);    // creates missing parents too
  // Names of the links directly under a group, in name order.
  std::vector<std::string> children(std::string const& group) const;
  // Unlinks an object (group, dataset) if it exists.
  void remove(std::string const& object);

  // Element type of a dataset, as "uint8", "int32", "float32", "float64", ...
  std::string dtype(std::string const& dataset) const;
  Dims dims(std::string const& dataset) const;
  // Throws unless the file really holds the data the dataset claims, so that nothing is allocated
  // or read for a size a sparse or forged file only declares: every chunk must be stored (for a
  // compressed dataset, counted: HDF5 calls compressed chunks "partly allocated"); without
  // compression the data cannot be larger than the file, with it not larger than 4096 x the
  // stored bytes (+ 64 MiB); data in external files or virtual datasets is refused, and so is a
  // filter this HDF5 library lacks (named). read() and
  // read_strings() check this themselves; callers of read_rows() check it once beforehand.
  void check_stored(std::string const& dataset) const;

  // T in {uint8_t, int32_t, int64_t, float, double}. Overwrites an existing dataset of the same
  // name. Reading throws if the stored type is not exactly T, and H5Error (never std::bad_alloc)
  // if the data cannot be held in memory.
  template <class T>
  void write(std::string const& dataset, T const* data, Dims const& dims);
  template <class T>
  std::vector<T> read(std::string const& dataset, Dims* dims = nullptr) const;
  // Rows [first, first + count) along the first dimension.
  template <class T>
  std::vector<T> read_rows(std::string const& dataset, std::size_t first, std::size_t count) const;

  // A 1-D dataset of variable-length UTF-8 strings (names, labels). Reading also accepts
  // fixed-length strings and throws if the dataset does not hold strings.
  void write_strings(std::string const& dataset, std::vector<std::string> const& values);
  std::vector<std::string> read_strings(std::string const& dataset) const;

  void set_attribute(std::string const& object, std::string const& name, std::string const& value);
  void set_attribute(std::string const& object, std::string const& name, char const* value) {
    set_attribute(object, name, std::string(value));
  }
  void set_attribute(std::string const& object, std::string const& name, long long value);
  void set_attribute(std::string const& object, std::string const& name, double value);
  bool has_attribute(std::string const& object, std::string const& name) const;
  // Attributes are read as single values: one holding several values (or none) is an error.
  std::string attribute_string(std::string const& object, std::string const& name) const;
  long long attribute_int(std::string const& object, std::string const& name) const;
  double attribute_double(std::string const& object, std::string const& name) const;

  void flush();
  // Flushes and closes the file, throwing H5Error (with the system's reason, e.g. "No space left
  // on device") if that fails: a writer calls it, where the destructor could only fail silently.
  void close();

 private:
  // Throws H5Error (the file closed) when a link in the file leads out of it (external or
  // user-defined): called on every open of an existing file, before anything in it is read.
  void refuse_links_out_of_file();
  friend void verify_h5(std::string const& path);
  [[noreturn]] void fail(std::string const& what) const;
  long long id_ = -1;
  std::string path_;
  bool writable_ = false;
  // Closes id_ unless its last writes could not reach the disk (release_if_unwritable).
  void close_quietly() noexcept;
};

// Whole-file check of an HDF5 file just written (io::commit_file's verify): it opens, and every
// dataset in it reads back in full. Throws H5Error naming the object.
void verify_h5(std::string const& path);

// What InputFile says after "joule reads ... only from regular files".
inline constexpr char const* kHdf5Files = "HDF5 files";
// An HDF5 input opened once (io::InputFile), its refusals thrown as H5Error: "PATH: is a FIFO (named
// pipe), not a regular file; joule reads HDF5 files only from regular files (nothing of it was read)".
InputFile open_input(std::string const& path);
// InputFile::require_unchanged, thrown as H5Error: "PATH: the file changed while joule read it (...);
// nothing of it was used".
void require_unchanged(InputFile const& in);

// libhdf5 itself (1.10.8 on Debian 12) can crash on a damaged or forged file: e.g. a global-heap
// object whose stored size exceeds its collection makes H5HG_read copy far past its buffer when a
// variable-length string is read (found by tests/fuzz). joule cannot fix the library, so its
// readers of files they did not just write (Dataset::open, Trainer::resume, checkpoint_config, the
// run-log readers) first do their reading in a child process: `work` runs there (fork). If the
// library crashes (a signal, or a sanitizer's abnormal exit) or hangs (no end within `timeout_s`),
// only the child dies, and this throws H5Error "PATH: reading this file crashed the HDF5 library
// (...)". Else it says whether `work` completed there or threw (its what(): the file's ordinary
// rejection); the caller then reads the file itself, safely. Without fork (it failed, or
// JOULE_READ_GUARD=off) `work` is not run (ran = false).
//
// The child and the caller must read the same file: `work` and the caller's own reads open `in`
// (H5File(in): /proc/self/fd/N of the one descriptor, which the child inherits), never the path,
// so a file renamed over the path after the child's check is not what the caller reads; and the
// caller ends with require_unchanged(in), which refuses a file written (or otherwise changed) in
// place meanwhile, by its status-change time.
struct ChildRead {
  bool ran = false;     // the child ran `work` to its end
  bool threw = false;   // ... and it threw
  std::string message;  // what() it threw
};
ChildRead read_in_child(InputFile const& in, std::function<void()> const& work, double timeout_s);
// A time limit for reading a file of this size in read_in_child: 60 s (JOULE_READ_TIMEOUT=S
// seconds instead) + 1 s per 20 MB.
double read_timeout_for(InputFile const& in);

namespace testing {
// Called in the parent after the child of read_in_child ended and before the caller reads the file
// itself: the moment an attacker who owns the file would swap it (tests only; null otherwise).
extern void (*after_guard_child)(InputFile const& in);
}  // namespace testing

}  // namespace joule::io
