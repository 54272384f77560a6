#include "core/io/h5file.hpp"

#include <hdf5.h>

#include <type_traits>

namespace joule::io {

namespace {

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, std::uint8_t>) return H5T_NATIVE_UINT8;
  if constexpr (std::is_same_v<T, std::int32_t>) return H5T_NATIVE_INT32;
  if constexpr (std::is_same_v<T, std::int64_t>) return H5T_NATIVE_INT64;
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
}

std::string describe(hid_t type) {
  std::size_t const bits = 8 * H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_STRING: return "string";
    default: return "type class " + std::to_string(int(H5Tget_class(type)));
  }
}

template <class T>
std::string describe_native() {
  return describe(native_type<T>());
}

// Closes an HDF5 handle at scope exit.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

}  // namespace

H5File::H5File(std::string const& path, Mode mode) : path_(path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions, not stderr noise
  if (mode == Mode::truncate) {
    id_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (id_ < 0) fail("cannot create the file (does the folder exist and is it writable?)");
  } else {
    id_ = H5Fopen(path.c_str(), mode == Mode::read ? H5F_ACC_RDONLY : H5F_ACC_RDWR, H5P_DEFAULT);
    if (id_ < 0) fail("cannot open: missing, unreadable, or not an HDF5 file");
  }
}

H5File::~H5File() {
  if (id_ >= 0) H5Fclose(id_);
}

H5File::H5File(H5File&& other) noexcept : id_(other.id_), path_(std::move(other.path_)) { other.id_ = -1; }

H5File& H5File::operator=(H5File&& other) noexcept {
  if (this != &other) {
    if (id_ >= 0) H5Fclose(id_);
    id_ = other.id_;
    path_ = std::move(other.path_);
    other.id_ = -1;
  }
  return *this;
}

void H5File::fail(std::string const& what) const { throw H5Error(path_ + ": " + what); }

bool H5File::exists(std::string const& object) const {
  if (object == "/" || object.empty()) return true;
  // H5Lexists needs every parent to exist: walk the path one component at a time.
  std::string partial;
  std::size_t pos = object[0] == '/' ? 1 : 0;
  while (pos <= object.size()) {
    std::size_t const next = object.find('/', pos);
    partial = object.substr(0, next == std::string::npos ? object.size() : next);
    if (H5Lexists(id_, partial.c_str(), H5P_DEFAULT) <= 0) return false;
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return true;
}

void H5File::create_group(std::string const& group) {
  if (exists(group)) return;
  Handle plist{H5Pcreate(H5P_LINK_CREATE), H5Pclose};
  H5Pset_create_intermediate_group(plist.id, 1);
  Handle g{H5Gcreate2(id_, group.c_str(), plist.id, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
  if (g.id < 0) fail("cannot create group " + group);
}

std::vector<std::string> H5File::children(std::string const& group) const {
  Handle g{H5Gopen2(id_, group.c_str(), H5P_DEFAULT), H5Gclose};
  if (g.id < 0) fail("no group " + group);
  H5G_info_t info;
  if (H5Gget_info(g.id, &info) < 0) fail("cannot list group " + group);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t const length =
        H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (length < 0) fail("cannot list group " + group);
    std::vector<char> name(std::size_t(length) + 1, '\0');
    H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    names.emplace_back(name.data());
  }
  return names;
}

void H5File::remove(std::string const& object) {
  if (exists(object) && H5Ldelete(id_, object.c_str(), H5P_DEFAULT) < 0) fail("cannot remove " + object);
}

std::string H5File::dtype(std::string const& dataset) const {
  Handle d{H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT), H5Dclose};
  if (d.id < 0) fail("no dataset " + dataset);
  Handle t{H5Dget_type(d.id), H5Tclose};
  return describe(t.id);
}

Dims H5File::dims(std::string const& dataset) const {
  Handle d{H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT), H5Dclose};
  if (d.id < 0) fail("no dataset " + dataset);
  Handle space{H5Dget_space(d.id), H5Sclose};
  int const rank = H5Sget_simple_extent_ndims(space.id);
  std::vector<hsize_t> extent(rank > 0 ? rank : 0);
  H5Sget_simple_extent_dims(space.id, extent.data(), nullptr);
  return Dims(extent.begin(), extent.end());
}

template <class T>
void H5File::write(std::string const& dataset, T const* data, Dims const& dims) {
  auto const slash = dataset.find_last_of('/');
  if (slash != std::string::npos && slash > 0) create_group(dataset.substr(0, slash));
  if (exists(dataset) && H5Ldelete(id_, dataset.c_str(), H5P_DEFAULT) < 0)
    fail("cannot replace dataset " + dataset);
  std::vector<hsize_t> extent(dims.begin(), dims.end());
  Handle space{H5Screate_simple(int(extent.size()), extent.data(), nullptr), H5Sclose};
  Handle d{H5Dcreate2(id_, dataset.c_str(), native_type<T>(), space.id, H5P_DEFAULT, H5P_DEFAULT,
                      H5P_DEFAULT),
           H5Dclose};
  if (d.id < 0) fail("cannot create dataset " + dataset);
  if (H5Dwrite(d.id, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail("cannot write dataset " + dataset);
}

namespace {
template <class T>
void check_type(H5File const& f, hid_t dataset, std::string const& name) {
  Handle t{H5Dget_type(dataset), H5Tclose};
  if (H5Tequal(t.id, native_type<T>()) <= 0)
    throw H5Error(f.path() + ": dataset " + name + " has element type " + describe(t.id) +
                  ", expected " + describe_native<T>());
}
}  // namespace

template <class T>
std::vector<T> H5File::read(std::string const& dataset, Dims* dims_out) const {
  Handle d{H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT), H5Dclose};
  if (d.id < 0) fail("no dataset " + dataset);
  check_type<T>(*this, d.id, dataset);
  Dims const shape = dims(dataset);
  std::size_t n = 1;
  for (auto e : shape) n *= e;
  std::vector<T> values(n);
  if (n > 0 && H5Dread(d.id, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    fail("cannot read dataset " + dataset);
  if (dims_out) *dims_out = shape;
  return values;
}

template <class T>
std::vector<T> H5File::read_rows(std::string const& dataset, std::size_t first,
                                 std::size_t count) const {
  Handle d{H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT), H5Dclose};
  if (d.id < 0) fail("no dataset " + dataset);
  check_type<T>(*this, d.id, dataset);
  Dims const shape = dims(dataset);
  if (shape.empty() || first + count > shape[0])
    fail("rows [" + std::to_string(first) + ", " + std::to_string(first + count) + ") of " +
         dataset + " are out of range");
  std::vector<hsize_t> start(shape.size(), 0), extent(shape.begin(), shape.end());
  start[0] = first;
  extent[0] = count;
  std::size_t n = 1;
  for (auto e : extent) n *= e;
  Handle file_space{H5Dget_space(d.id), H5Sclose};
  H5Sselect_hyperslab(file_space.id, H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr);
  Handle mem_space{H5Screate_simple(int(extent.size()), extent.data(), nullptr), H5Sclose};
  std::vector<T> values(n);
  if (n > 0 && H5Dread(d.id, native_type<T>(), mem_space.id, file_space.id, H5P_DEFAULT, values.data()) < 0)
    fail("cannot read rows of dataset " + dataset);
  return values;
}

#define JOULE_H5_INSTANTIATE(T)                                                          \
  template void H5File::write<T>(std::string const&, T const*, Dims const&);             \
  template std::vector<T> H5File::read<T>(std::string const&, Dims*) const;              \
  template std::vector<T> H5File::read_rows<T>(std::string const&, std::size_t, std::size_t) const;
JOULE_H5_INSTANTIATE(std::uint8_t)
JOULE_H5_INSTANTIATE(std::int32_t)
JOULE_H5_INSTANTIATE(std::int64_t)
JOULE_H5_INSTANTIATE(float)
JOULE_H5_INSTANTIATE(double)
#undef JOULE_H5_INSTANTIATE

void H5File::write_strings(std::string const& dataset, std::vector<std::string> const& values) {
  auto const slash = dataset.find_last_of('/');
  if (slash != std::string::npos && slash > 0) create_group(dataset.substr(0, slash));
  if (exists(dataset) && H5Ldelete(id_, dataset.c_str(), H5P_DEFAULT) < 0)
    fail("cannot replace dataset " + dataset);
  Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(type.id, H5T_VARIABLE);
  H5Tset_cset(type.id, H5T_CSET_UTF8);
  hsize_t const n = values.size();
  Handle space{H5Screate_simple(1, &n, nullptr), H5Sclose};
  Handle d{H5Dcreate2(id_, dataset.c_str(), type.id, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose};
  if (d.id < 0) fail("cannot create dataset " + dataset);
  std::vector<char const*> pointers;
  for (auto const& v : values) pointers.push_back(v.c_str());
  if (n > 0 && H5Dwrite(d.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) < 0)
    fail("cannot write dataset " + dataset);
}

std::vector<std::string> H5File::read_strings(std::string const& dataset) const {
  Handle d{H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT), H5Dclose};
  if (d.id < 0) fail("no dataset " + dataset);
  Handle type{H5Dget_type(d.id), H5Tclose};
  if (H5Tget_class(type.id) != H5T_STRING)
    fail("dataset " + dataset + " has element type " + describe(type.id) + ", expected string");
  Dims const shape = dims(dataset);
  if (shape.size() != 1)
    fail("dataset " + dataset + " has " + std::to_string(shape.size()) + " dimensions, expected a list of strings");
  std::size_t const n = shape[0];
  std::vector<std::string> values;
  if (n == 0) return values;
  if (H5Tis_variable_str(type.id) > 0) {
    Handle mem{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mem.id, H5T_VARIABLE);
    H5Tset_cset(mem.id, H5Tget_cset(type.id));
    std::vector<char*> pointers(n, nullptr);
    if (H5Dread(d.id, mem.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) < 0)
      fail("cannot read dataset " + dataset);
    for (char* p : pointers) {  // HDF5 allocated each string: copy it, then give it back
      values.emplace_back(p ? p : "");
      if (p) H5free_memory(p);
    }
    return values;
  }
  std::size_t const width = H5Tget_size(type.id);
  std::vector<char> buffer(n * width + 1, '\0');
  if (H5Dread(d.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()) < 0)
    fail("cannot read dataset " + dataset);
  for (std::size_t i = 0; i < n; ++i) {
    char const* s = buffer.data() + i * width;
    std::size_t length = 0;
    while (length < width && s[length] != '\0') ++length;
    values.emplace_back(s, length);
  }
  return values;
}

namespace {
hid_t open_object(H5File const& f, hid_t file, std::string const& object) {
  hid_t const o = H5Oopen(file, object.c_str(), H5P_DEFAULT);
  if (o < 0) throw H5Error(f.path() + ": no object " + object);
  return o;
}

void replace_attribute(H5File const& f, hid_t obj, std::string const& name, hid_t type,
                       void const* value) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  Handle a{H5Acreate2(obj, name.c_str(), type, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  if (a.id < 0 || H5Awrite(a.id, type, value) < 0)
    throw H5Error(f.path() + ": cannot write attribute " + name);
}
}  // namespace

void H5File::set_attribute(std::string const& object, std::string const& name,
                           std::string const& value) {
  Handle obj{open_object(*this, id_, object), H5Oclose};
  Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(type.id, H5T_VARIABLE);
  H5Tset_cset(type.id, H5T_CSET_UTF8);
  char const* s = value.c_str();
  replace_attribute(*this, obj.id, name, type.id, &s);
}

void H5File::set_attribute(std::string const& object, std::string const& name, long long value) {
  Handle obj{open_object(*this, id_, object), H5Oclose};
  replace_attribute(*this, obj.id, name, H5T_NATIVE_LLONG, &value);
}

void H5File::set_attribute(std::string const& object, std::string const& name, double value) {
  Handle obj{open_object(*this, id_, object), H5Oclose};
  replace_attribute(*this, obj.id, name, H5T_NATIVE_DOUBLE, &value);
}

bool H5File::has_attribute(std::string const& object, std::string const& name) const {
  if (!exists(object)) return false;
  return H5Aexists_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT) > 0;
}

namespace {
Handle open_attribute(H5File const& f, hid_t file, std::string const& object,
                      std::string const& name) {
  hid_t const a = H5Aopen_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0) throw H5Error(f.path() + ": no attribute '" + name + "' on " + object);
  return Handle{a, H5Aclose};
}
}  // namespace

std::string H5File::attribute_string(std::string const& object, std::string const& name) const {
  Handle a = open_attribute(*this, id_, object, name);
  Handle type{H5Aget_type(a.id), H5Tclose};
  if (H5Tget_class(type.id) != H5T_STRING)
    fail("attribute '" + name + "' on " + object + " is " + describe(type.id) + ", expected a string");
  if (H5Tis_variable_str(type.id) > 0) {
    char* s = nullptr;
    Handle mem{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mem.id, H5T_VARIABLE);
    H5Tset_cset(mem.id, H5Tget_cset(type.id));
    if (H5Aread(a.id, mem.id, &s) < 0 || !s) fail("cannot read attribute '" + name + "'");
    std::string value = s;
    H5free_memory(s);
    return value;
  }
  std::vector<char> buf(H5Tget_size(type.id) + 1, '\0');
  if (H5Aread(a.id, type.id, buf.data()) < 0) fail("cannot read attribute '" + name + "'");
  return buf.data();
}

long long H5File::attribute_int(std::string const& object, std::string const& name) const {
  Handle a = open_attribute(*this, id_, object, name);
  Handle type{H5Aget_type(a.id), H5Tclose};
  if (H5Tget_class(type.id) != H5T_INTEGER)
    fail("attribute '" + name + "' on " + object + " is " + describe(type.id) + ", expected an integer");
  long long value = 0;
  if (H5Aread(a.id, H5T_NATIVE_LLONG, &value) < 0) fail("cannot read attribute '" + name + "'");
  return value;
}

double H5File::attribute_double(std::string const& object, std::string const& name) const {
  Handle a = open_attribute(*this, id_, object, name);
  Handle type{H5Aget_type(a.id), H5Tclose};
  if (H5Tget_class(type.id) != H5T_FLOAT && H5Tget_class(type.id) != H5T_INTEGER)
    fail("attribute '" + name + "' on " + object + " is " + describe(type.id) + ", expected a number");
  double value = 0;
  if (H5Aread(a.id, H5T_NATIVE_DOUBLE, &value) < 0) fail("cannot read attribute '" + name + "'");
  return value;
}

void H5File::flush() {
  if (H5Fflush(id_, H5F_SCOPE_GLOBAL) < 0) fail("cannot flush");
}

}  // namespace joule::io
