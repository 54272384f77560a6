#pragma once
// Read-only access to the PyTorch golden files (HDF5, written by tests/golden/*.py).
#include <string>
#include <vector>

namespace joule::test {

class GoldenFile {
 public:
  explicit GoldenFile(std::string const& path);  // throws std::runtime_error naming the path
  ~GoldenFile();
  GoldenFile(GoldenFile const&) = delete;
  GoldenFile& operator=(GoldenFile const&) = delete;

  // A float64 dataset, flattened row-major; `dims` receives its shape.
  std::vector<double> read(std::string const& dataset, std::vector<std::size_t>* dims = nullptr) const;
  long attribute_int(std::string const& object, std::string const& name) const;
  double attribute_double(std::string const& object, std::string const& name) const;
  std::string attribute_string(std::string const& object, std::string const& name) const;

  // Directory of golden files: $JOULE_GOLDEN_DIR, else the source tree's tests/golden.
  static std::string directory();

 private:
  long file_ = -1;
  std::string path_;
};

}  // namespace joule::test
