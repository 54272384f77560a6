#pragma once
// A small RAII wrapper over the HDF5 C API: the one place in joule that talks to libhdf5.
// Datasets, checkpoints and (later) the tuning log go through it. Every failure throws H5Error
// naming the file and the object, and reading checks the stored element type, so a malformed
// file gives a message instead of garbage.
#include <cstddef>
#include <cstdint>
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

  // T in {uint8_t, int32_t, int64_t, float, double}. Overwrites an existing dataset of the same
  // name. Reading throws if the stored type is not exactly T.
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
  std::string attribute_string(std::string const& object, std::string const& name) const;
  long long attribute_int(std::string const& object, std::string const& name) const;
  double attribute_double(std::string const& object, std::string const& name) const;

  void flush();

 private:
  [[noreturn]] void fail(std::string const& what) const;
  long long id_ = -1;
  std::string path_;
};

}  // namespace joule::io
