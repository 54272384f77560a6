#pragma once
// Hand-made hostile HDF5 objects for the tests (what a damaged or forged file can hold that
// joule's own writer never produces), through the HDF5 C API directly. Each function opens the
// file read-write (it must exist), changes one object and closes it again.
#include <hdf5.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::test::hostile {

namespace detail {
struct File {
  hid_t id;
  explicit File(std::string const& path) : id(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {
    if (id < 0) throw std::runtime_error("hostile: cannot open " + path);
  }
  ~File() { H5Fclose(id); }
};
inline void replace(hid_t file, std::string const& name) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0) H5Ldelete(file, name.c_str(), H5P_DEFAULT);
}
}  // namespace detail

// A chunked dataset of `dims` (element type `type`, e.g. H5T_NATIVE_INT32) of which only the
// first `written_rows` rows are stored (0: none): a sparse file that claims what it does not hold.
inline void sparse_dataset(std::string const& path, std::string const& name, hid_t type,
                           std::vector<hsize_t> const& dims, hsize_t written_rows = 0) {
  detail::File f(path);
  detail::replace(f.id, name);
  std::vector<hsize_t> chunk(dims.size(), 1);
  for (std::size_t i = 1; i < dims.size(); ++i) chunk[i] = dims[i];
  hid_t const space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  hid_t const dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
  hid_t const d = H5Dcreate2(f.id, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (d < 0) throw std::runtime_error("hostile: cannot create " + name);
  if (written_rows > 0) {
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    count[0] = written_rows;
    hsize_t n = 1;
    for (auto c : count) n *= c;
    std::vector<std::uint8_t> zeros(n * H5Tget_size(type), 0);
    hid_t const mem = H5Screate_simple(int(count.size()), count.data(), nullptr);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    H5Dwrite(d, type, mem, space, H5P_DEFAULT, zeros.data());
    H5Sclose(mem);
  }
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
}

// A dataset whose data lives in another file (`external`), as HDF5's external storage allows.
inline void external_dataset(std::string const& path, std::string const& name, hid_t type,
                             std::vector<hsize_t> const& dims, std::string const& external) {
  detail::File f(path);
  detail::replace(f.id, name);
  hsize_t n = H5Tget_size(type);
  for (auto e : dims) n *= e;
  hid_t const space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  hid_t const dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_external(dcpl, external.c_str(), 0, n);
  hid_t const d = H5Dcreate2(f.id, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (d < 0) throw std::runtime_error("hostile: cannot create " + name);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
}

// A link `name` to `object` in another file (`other`), which HDF5 opens by that name when the link
// is followed (a FIFO there blocks the open; a file swapped in after a check is read unchecked).
inline void external_link(std::string const& path, std::string const& name, std::string const& other,
                          std::string const& object) {
  detail::File f(path);
  detail::replace(f.id, name);
  if (H5Lcreate_external(other.c_str(), object.c_str(), f.id, name.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0)
    throw std::runtime_error("hostile: cannot create the external link " + name);
}

// A dataset `name` of `n` variable-length strings that all name one stored string of `bytes` bytes:
// written as one long string and n - 1 short ones, then every element's heap descriptor (length,
// collection address, index: 16 bytes in a contiguous layout) overwritten with the first one's.
inline void repeated_string_dataset(std::string const& path, std::string const& name, std::size_t n,
                                    std::size_t bytes) {
  haddr_t offset = HADDR_UNDEF;
  {
    detail::File f(path);
    detail::replace(f.id, name);
    hid_t const type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    hsize_t const dims = n;
    hid_t const space = H5Screate_simple(1, &dims, nullptr);
    hid_t const d = H5Dcreate2(f.id, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0) throw std::runtime_error("hostile: cannot create " + name);
    std::string const big(bytes, 'x');
    std::vector<char const*> values(n, "y");
    values[0] = big.c_str();
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    offset = H5Dget_offset(d);
    H5Dclose(d);
    H5Sclose(space);
    H5Tclose(type);
  }
  if (offset == HADDR_UNDEF) throw std::runtime_error("hostile: no contiguous storage for " + name);
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  if (!f) throw std::runtime_error("hostile: cannot patch " + path);
  char first[16];
  bool ok = std::fseek(f, long(offset), SEEK_SET) == 0 && std::fread(first, 1, 16, f) == 16;
  for (std::size_t i = 1; ok && i < n; ++i)
    ok = std::fseek(f, long(offset + 16 * i), SEEK_SET) == 0 && std::fwrite(first, 1, 16, f) == 16;
  std::fclose(f);
  if (!ok) throw std::runtime_error("hostile: cannot patch " + path);
}

// An attribute holding `values` (variable-length strings) where a single one is expected.
inline void string_array_attribute(std::string const& path, std::string const& object, std::string const& name,
                                   std::vector<std::string> const& values) {
  detail::File f(path);
  hid_t const o = H5Oopen(f.id, object.c_str(), H5P_DEFAULT);
  if (H5Aexists(o, name.c_str()) > 0) H5Adelete(o, name.c_str());
  hid_t const type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  hsize_t const n = values.size();
  hid_t const space = H5Screate_simple(1, &n, nullptr);
  hid_t const a = H5Acreate2(o, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<char const*> pointers;
  for (auto const& v : values) pointers.push_back(v.c_str());
  H5Awrite(a, type, pointers.data());
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
  H5Oclose(o);
}

// An integer attribute holding several values where one is expected.
inline void int_array_attribute(std::string const& path, std::string const& object, std::string const& name,
                                std::vector<long long> const& values) {
  detail::File f(path);
  hid_t const o = H5Oopen(f.id, object.c_str(), H5P_DEFAULT);
  if (H5Aexists(o, name.c_str()) > 0) H5Adelete(o, name.c_str());
  hsize_t const n = values.size();
  hid_t const space = H5Screate_simple(1, &n, nullptr);
  hid_t const a = H5Acreate2(o, name.c_str(), H5T_NATIVE_LLONG, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_LLONG, values.data());
  H5Aclose(a);
  H5Sclose(space);
  H5Oclose(o);
}

}  // namespace joule::test::hostile
