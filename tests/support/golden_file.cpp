#include "support/golden_file.hpp"

#include <hdf5.h>

#include <cstdlib>
#include <stdexcept>

namespace joule::test {

namespace {
[[noreturn]] void fail(std::string const& path, std::string const& what) {
  throw std::runtime_error("golden file " + path + ": " + what);
}
}  // namespace

GoldenFile::GoldenFile(std::string const& path) : path_(path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by exceptions below
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) fail(path, "cannot open (missing or not HDF5)");
}

GoldenFile::~GoldenFile() {
  if (file_ >= 0) H5Fclose(file_);
}

std::vector<double> GoldenFile::read(std::string const& dataset, std::vector<std::size_t>* dims) const {
  hid_t const d = H5Dopen2(file_, dataset.c_str(), H5P_DEFAULT);
  if (d < 0) fail(path_, "no dataset " + dataset);
  hid_t const space = H5Dget_space(d);
  int const rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> extent(rank > 0 ? rank : 0);
  H5Sget_simple_extent_dims(space, extent.data(), nullptr);
  std::size_t n = 1;
  if (dims) dims->clear();
  for (auto e : extent) {
    n *= e;
    if (dims) dims->push_back(e);
  }
  std::vector<double> values(n);
  herr_t const status = H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Sclose(space);
  H5Dclose(d);
  if (status < 0) fail(path_, "cannot read " + dataset + " as float64");
  return values;
}

namespace {
hid_t open_attribute(long file, std::string const& path, std::string const& object,
                     std::string const& name) {
  hid_t const a = H5Aopen_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0) fail(path, "no attribute " + name + " on " + object);
  return a;
}
}  // namespace

long GoldenFile::attribute_int(std::string const& object, std::string const& name) const {
  hid_t const a = open_attribute(file_, path_, object, name);
  long value = 0;
  herr_t const status = H5Aread(a, H5T_NATIVE_LONG, &value);
  H5Aclose(a);
  if (status < 0) fail(path_, "attribute " + name + " is not an integer");
  return value;
}

double GoldenFile::attribute_double(std::string const& object, std::string const& name) const {
  hid_t const a = open_attribute(file_, path_, object, name);
  double value = 0;
  herr_t const status = H5Aread(a, H5T_NATIVE_DOUBLE, &value);
  H5Aclose(a);
  if (status < 0) fail(path_, "attribute " + name + " is not a number");
  return value;
}

std::string GoldenFile::attribute_string(std::string const& object, std::string const& name) const {
  hid_t const a = open_attribute(file_, path_, object, name);
  hid_t const type = H5Aget_type(a);
  std::string value;
  if (H5Tget_class(type) != H5T_STRING) {
    H5Tclose(type);
    H5Aclose(a);
    fail(path_, "attribute " + name + " is not a string");
  }
  if (H5Tis_variable_str(type) > 0) {
    char* s = nullptr;
    hid_t const mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    if (H5Aread(a, mem, &s) >= 0 && s) {
      value = s;
      H5free_memory(s);
    }
    H5Tclose(mem);
  } else {
    std::vector<char> buf(H5Tget_size(type) + 1, '\0');
    H5Aread(a, type, buf.data());
    value = buf.data();
  }
  H5Tclose(type);
  H5Aclose(a);
  return value;
}

std::string GoldenFile::directory() {
  char const* dir = std::getenv("JOULE_GOLDEN_DIR");
  return dir ? dir : JOULE_TEST_GOLDEN_DIR;
}

}  // namespace joule::test
