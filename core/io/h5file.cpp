#include "core/io/h5file.hpp"

#include "core/detail/bytes_text.hpp"
#include "core/environment.hpp"

#include <hdf5.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>

namespace joule::io {

namespace {

using detail::bytes_text;

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

std::string dims_text(Dims const& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Elements x element size, or false if that does not fit a size_t.
bool checked_bytes(Dims const& dims, std::size_t element, std::size_t* bytes) {
  std::size_t n = element;
  for (auto e : dims) {
    if (e != 0 && n > std::numeric_limits<std::size_t>::max() / e) return false;
    n *= e;
  }
  *bytes = n;
  return true;
}

Dims dataset_dims(H5File const& f, hid_t dataset, std::string const& name) {
  Handle space{H5Dget_space(dataset), H5Sclose};
  int const rank = space.id < 0 ? -1 : H5Sget_simple_extent_ndims(space.id);
  if (rank < 0) throw H5Error(f.path() + ": cannot read the shape of dataset " + name);
  std::vector<hsize_t> extent(rank);
  if (rank > 0 && H5Sget_simple_extent_dims(space.id, extent.data(), nullptr) < 0)
    throw H5Error(f.path() + ": cannot read the shape of dataset " + name);
  return Dims(extent.begin(), extent.end());
}

// See H5File::check_stored.
void require_stored(H5File const& f, hid_t file, hid_t dataset, std::string const& name) {
  auto const problem = [&](std::string const& what) { throw H5Error(f.path() + ": dataset " + name + " " + what); };
  Handle type{H5Dget_type(dataset), H5Tclose};
  Dims const dims = dataset_dims(f, dataset, name);
  std::size_t const element = type.id < 0 ? 0 : H5Tget_size(type.id);
  std::size_t logical = 0;
  if (!checked_bytes(dims, element, &logical)) problem("has shape " + dims_text(dims) + ", whose size overflows");
  if (logical == 0) return;
  std::string const claims = "claims " + dims_text(dims) + " values (" + bytes_text(double(logical)) + ")";
  Handle dcpl{H5Dget_create_plist(dataset), H5Pclose};
  if (dcpl.id < 0) problem("has no readable storage layout");
  H5D_layout_t const layout = H5Pget_layout(dcpl.id);
  if (layout == H5D_VIRTUAL) problem("is a virtual dataset; joule reads only data stored in the file itself");
  if (H5Pget_external_count(dcpl.id) > 0)
    problem("keeps its data in external files; joule reads only data stored in the file itself");
  // Filters (gzip, shuffle, fletcher32, szip: what h5py users write) are read by HDF5 itself; one
  // this library lacks (h5py's LZF, Blosc, ... are plugins) is named, not taken for damage.
  int const filters = H5Pget_nfilters(dcpl.id);
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t values = 0;
    char filter_name[128] = {};
    H5Z_filter_t const id = H5Pget_filter2(dcpl.id, unsigned(i), &flags, &values, nullptr, sizeof filter_name,
                                           filter_name, &config);
    if (id < 0) problem("has a filter pipeline HDF5 cannot read");
    if (H5Zfilter_avail(id) <= 0)
      problem("is stored through HDF5 filter " + std::to_string(id) +
              (filter_name[0] ? std::string(" (\"") + filter_name + "\")" : "") +
              ", which this HDF5 library does not have (h5py's LZF is filter 32000, a plugin); write it again "
              "with gzip (h5py: compression=\"gzip\") or without compression");
  }
  if (layout == H5D_CHUNKED && filters > 0) {
    // HDF5 calls compressed chunks "partly allocated" (they take less than the data): count them.
    int const rank = int(dims.size());
    std::vector<hsize_t> chunk(std::size_t(std::max(rank, 1)), 0);
    if (H5Pget_chunk(dcpl.id, rank, chunk.data()) != rank) problem("has a chunk shape HDF5 cannot read");
    double expected = 1;
    for (int d = 0; d < rank; ++d) expected *= chunk[d] ? double((dims[d] + chunk[d] - 1) / chunk[d]) : 0.0;
    hsize_t stored = 0;
    Handle space{H5Dget_space(dataset), H5Sclose};
    if (space.id < 0 || H5Dget_num_chunks(dataset, space.id, &stored) < 0) problem("has a chunk index HDF5 cannot read");
    if (stored == 0) problem(claims + " but stores none of them (a sparse or forged file)");
    if (double(stored) < expected)
      problem(claims + " but stores only " + std::to_string(stored) + " of its " + std::to_string((long long)expected) +
              " chunks (a sparse or forged file)");
  } else if (layout != H5D_COMPACT) {
    H5D_space_status_t status;
    if (H5Dget_space_status(dataset, &status) < 0) problem("has a storage index HDF5 cannot read");
    if (status == H5D_SPACE_STATUS_NOT_ALLOCATED)
      problem(claims + " but stores none of them (a sparse or forged file)");
    if (status == H5D_SPACE_STATUS_PART_ALLOCATED)
      problem(claims + " but stores only part of them (a sparse or forged file)");
  }
  hsize_t file_size = 0;
  if (H5Fget_filesize(file, &file_size) < 0) problem("is in a file whose size HDF5 cannot tell");
  if (filters <= 0) {
    if (logical > file_size) problem(claims + ", more than the whole file (" + bytes_text(double(file_size)) + ")");
    return;
  }
  double const stored = std::min<double>(double(H5Dget_storage_size(dataset)), double(file_size));
  if (double(logical) > 4096.0 * stored + double(64 << 20))
    problem(claims + " from " + bytes_text(stored) + " of compressed data, more than any compression expands to");
}

template <class T>
std::vector<T> allocate(H5File const& f, std::size_t n, std::string const& name) {
  try {
    return std::vector<T>(n);
  } catch (std::bad_alloc const&) {
    throw H5Error(f.path() + ": dataset " + name + ": cannot allocate " + bytes_text(double(n) * sizeof(T)) +
                  " to read it");
  } catch (std::length_error const&) {
    throw H5Error(f.path() + ": dataset " + name + ": cannot allocate " + bytes_text(double(n) * sizeof(T)) +
                  " to read it");
  }
}

// The system's reason for the innermost failure on HDF5's error stack ("No space left on device"
// from a failed write), or "".
std::string system_reason() {
  std::string reason;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, H5E_error2_t const* e, void* out) -> herr_t {
        auto& text = *static_cast<std::string*>(out);
        if (!text.empty() || !e->desc) return 0;
        std::string const desc = e->desc;
        auto const at = desc.find("error message = '");
        if (at == std::string::npos) return 0;
        auto const from = at + 17, to = desc.find('\'', from);
        text = desc.substr(from, to == std::string::npos ? std::string::npos : to - from);
        return 0;
      },
      &reason);
  return reason;
}

// Once, before the library starts: no HDF5 clean-up at exit. After a failed write (a full disk),
// libhdf5 1.10 keeps the file it could not close and crashed (SIGSEGV in H5F__close_cb) when it
// tried again at exit; joule closes every file itself (H5File) and removes what failed.
void start_library() {
  static bool const started = [] {
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions, not stderr noise
    return true;
  }();
  (void)started;
}

}  // namespace

namespace {
// An HDF5 file is read from a regular file only: a FIFO blocks its reader until a writer comes
// (forever, if none does), a device can be read without end.
void require_regular_input(std::string const& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;  // missing: HDF5's open says so
  throw H5Error(path + ": is " + file_kind_text(unsigned(st.st_mode)) + ", not a regular file; joule reads " +
                kHdf5Files + " only from regular files (nothing of it was read)");
}
}  // namespace

namespace {
// Writes a block to the new file and takes it back before HDF5 creates it: a full disk, a quota or
// an I/O error at the first bytes is then reported here, with its reason. HDF5 2.x built with its
// assertions on (Debian sid's) aborts in H5F__dest when its own create fails that way. Returns
// errno, 0 when the block reached the disk.
int probe_writable(std::string const& path) {
  int const fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return errno;
  static char const block[4096] = {};
  int error = 0;
  for (std::size_t done = 0; done < sizeof block && !error;) {
    ssize_t const n = ::write(fd, block + done, sizeof block - done);
    if (n < 0 && errno != EINTR) error = errno;
    if (n > 0) done += std::size_t(n);
  }
  if (!error && ::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) error = errno;  // (EINVAL: no fsync here)
  if (!error && ::ftruncate(fd, 0) != 0) error = errno;
  if (::close(fd) != 0 && !error) error = errno;
  return error;
}
}  // namespace

InputFile open_input(std::string const& path) {
  try {
    return InputFile(path, kHdf5Files);
  } catch (InputError const& e) {
    throw H5Error(e.what());
  }
}

void require_unchanged(InputFile const& in) {
  try {
    in.require_unchanged();
  } catch (InputError const& e) {
    throw H5Error(e.what());
  }
}

namespace {
// A link that leaves the file (an external link, a user-defined one) makes HDF5 open another file
// by its name when an object is reached through it: a file the guard's child checked could then
// send joule's own read to a FIFO, a device or a crashing file its owner put at that name after
// the check. joule writes hard links only; any other kind is refused on opening a file to read,
// before any object in it is touched (H5Lvisit lists links without following them). Soft links
// stay inside the file and are left to HDF5's own limit on their chains.
struct LinkProblem {
  std::string name, kind;
};
herr_t find_link_out_of_file(hid_t, char const* name, H5L_info_t const* info, void* data) {
  if (info->type == H5L_TYPE_HARD || info->type == H5L_TYPE_SOFT) return 0;
  auto* problem = static_cast<LinkProblem*>(data);
  problem->name = name;
  problem->kind = info->type == H5L_TYPE_EXTERNAL ? "an external link (to an object of another file)"
                                                  : "a user-defined link";
  return 1;  // stops the walk
}
}  // namespace

void H5File::refuse_links_out_of_file() {
  LinkProblem problem;
  herr_t const walked = H5Lvisit(id_, H5_INDEX_NAME, H5_ITER_INC, find_link_out_of_file, &problem);
  if (walked < 0) {
    close_quietly();
    throw H5Error(path_ + ": cannot list the links in this file: it is damaged or forged, and nothing of it was used");
  }
  if (!problem.kind.empty()) {
    close_quietly();
    throw H5Error(path_ + ": /" + problem.name + " is " + problem.kind +
                  "; joule reads only objects stored in the file itself, and nothing of it was used");
  }
}

H5File::H5File(InputFile const& in) : path_(in.path()), writable_(false) {
  start_library();
  // Written since it was opened (its owner rewriting it in place after the guard's child checked
  // it): refused before HDF5 parses it here. What changes while HDF5 parses it is found by the
  // reader's require_unchanged() afterwards, too late to contain a crash: a file of another user
  // that its owner rewrites in place in that instant is the limit of this check (docs/outputs.md).
  try {
    in.require_unchanged();
  } catch (InputError const& e) {
    throw H5Error(e.what());
  }
  id_ = H5Fopen(in.proc_path().c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id_ < 0) {
    // A file changed meanwhile is said as that, not as what HDF5 made of it. (HDF5 also resolves
    // the name it is given to a real path: once the file is unlinked, /proc/self/fd/N resolves to
    // "PATH (deleted)", and the open fails.)
    require_unchanged(in);
    fail("cannot open: missing, unreadable, or not an HDF5 file");
  }
  // The file HDF5 holds must be the one `in` opened: through /proc it is, by the kernel; through the
  // path (no /proc) another file may have been renamed there since. Asked of the sec2 driver (the
  // default), whose handle is its descriptor.
  if (in.through_proc()) {
    refuse_links_out_of_file();
    return;
  }
  hid_t const access = H5Fget_access_plist(id_);
  void* handle = nullptr;
  struct stat st {};
  bool const other = access >= 0 && H5Pget_driver(access) == H5FD_SEC2 &&
                     H5Fget_vfd_handle(id_, access, &handle) >= 0 && handle &&
                     ::fstat(*static_cast<int*>(handle), &st) == 0 &&
                     (std::uint64_t(st.st_dev) != in.identity().device || std::uint64_t(st.st_ino) != in.identity().inode);
  if (access >= 0) H5Pclose(access);
  if (other) {
    close_quietly();
    throw H5Error(path_ + ": the file changed while joule read it (another file is now at this path); nothing of "
                  "it was used");
  }
  refuse_links_out_of_file();
}

H5File::H5File(std::string const& path, Mode mode) : path_(path), writable_(mode != Mode::read) {
  start_library();
  if (mode != Mode::truncate) require_regular_input(path);
  if (mode == Mode::truncate) {
    if (int const error = probe_writable(path))
      throw H5Error(path + ": cannot create the file (" + std::strerror(error) + ")");
    id_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (id_ < 0) fail("cannot create the file (does the folder exist and is it writable?)");
  } else {
    id_ = H5Fopen(path.c_str(), mode == Mode::read ? H5F_ACC_RDONLY : H5F_ACC_RDWR, H5P_DEFAULT);
    if (id_ < 0) fail("cannot open: missing, unreadable, or not an HDF5 file");
    refuse_links_out_of_file();
  }
}

// A file whose metadata could not be written (a full disk, an I/O error) is not closed: the
// library's cache stays dirty, and HDF5 built with its assertions on (Debian sid's 2.2) aborts in
// H5F__dest when such a file is closed ("H5AC_cache_is_clean"). Its handle and descriptor are
// left for the process (no clean-up at exit: start_library); what failed is removed by the caller
// by name. A flush first tells which: it writes what the close would.
void H5File::close_quietly() noexcept {
  if (id_ < 0) return;
  hid_t const id = id_;
  id_ = -1;
  if (writable_ && H5Fflush(id, H5F_SCOPE_LOCAL) < 0) return;  // left open, see above
  H5Fclose(id);
}

H5File::~H5File() { close_quietly(); }

H5File::H5File(H5File&& other) noexcept
    : id_(other.id_), path_(std::move(other.path_)), writable_(other.writable_) {
  other.id_ = -1;
}

H5File& H5File::operator=(H5File&& other) noexcept {
  if (this != &other) {
    close_quietly();
    id_ = other.id_;
    path_ = std::move(other.path_);
    writable_ = other.writable_;
    other.id_ = -1;
  }
  return *this;
}

void H5File::fail(std::string const& what) const {
  std::string const reason = system_reason();
  throw H5Error(path_ + ": " + what + (reason.empty() ? "" : " (" + reason + ")"));
}

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
  return dataset_dims(*this, d.id, dataset);
}

void H5File::check_stored(std::string const& dataset) const {
  Handle d{H5Dopen2(id_, dataset.c_str(), H5P_DEFAULT), H5Dclose};
  if (d.id < 0) fail("no dataset " + dataset);
  require_stored(*this, id_, d.id, dataset);
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
  require_stored(*this, id_, d.id, dataset);  // before allocating what the file only claims
  Dims const shape = dataset_dims(*this, d.id, dataset);
  std::size_t bytes = 0;
  checked_bytes(shape, sizeof(T), &bytes);  // cannot overflow: require_stored checked it
  std::size_t const n = bytes / sizeof(T);
  std::vector<T> values = allocate<T>(*this, n, dataset);
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
  Dims const shape = dataset_dims(*this, d.id, dataset);
  if (shape.empty() || first > shape[0] || count > shape[0] - first)
    fail("rows [" + std::to_string(first) + ", " +
         (count <= std::numeric_limits<std::size_t>::max() - first ? std::to_string(first + count)
                                                                   : std::to_string(first) + " + " + std::to_string(count)) +
         ") of " + dataset + " are out of range");
  std::vector<hsize_t> start(shape.size(), 0), extent(shape.begin(), shape.end());
  start[0] = first;
  extent[0] = count;
  Dims const rows(extent.begin(), extent.end());
  std::size_t bytes = 0;
  if (!checked_bytes(rows, sizeof(T), &bytes))
    fail("rows of dataset " + dataset + " of shape " + dims_text(shape) + " are too large to read");
  std::size_t const n = bytes / sizeof(T);
  Handle file_space{H5Dget_space(d.id), H5Sclose};
  if (n > 0 &&
      H5Sselect_hyperslab(file_space.id, H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr) < 0)
    fail("cannot select rows of dataset " + dataset);
  Handle mem_space{H5Screate_simple(int(extent.size()), extent.data(), nullptr), H5Sclose};
  std::vector<T> values = allocate<T>(*this, n, dataset);
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
  Dims const shape = dataset_dims(*this, d.id, dataset);
  if (shape.size() != 1)
    fail("dataset " + dataset + " has " + std::to_string(shape.size()) + " dimensions, expected a list of strings");
  std::size_t const n = shape[0];
  std::vector<std::string> values;
  if (n == 0) return values;
  require_stored(*this, id_, d.id, dataset);
  if (H5Tis_variable_str(type.id) > 0) {
    Handle mem{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mem.id, H5T_VARIABLE);
    H5Tset_cset(mem.id, H5Tget_cset(type.id));
    // Read a few at a time, the total bounded: every element of a forged file can name the same
    // large string in the global heap, which HDF5 would copy once per element (a 1 MB file of
    // 2,000 names of one 1 MiB string asks for 2 GB).
    constexpr std::size_t kSlice = 16;
    constexpr std::size_t kMaxTotal = std::size_t(256) << 20;
    std::vector<char*> pointers = allocate<char*>(*this, std::min(n, kSlice), dataset);
    values.reserve(n);
    std::size_t total = 0;
    Handle file_space{H5Dget_space(d.id), H5Sclose};
    for (std::size_t start = 0; start < n; start += kSlice) {
      hsize_t const first = start, count = std::min(kSlice, n - start);
      Handle slice{H5Screate_simple(1, &count, nullptr), H5Sclose};
      if (file_space.id < 0 || slice.id < 0 ||
          H5Sselect_hyperslab(file_space.id, H5S_SELECT_SET, &first, nullptr, &count, nullptr) < 0 ||
          H5Dread(d.id, mem.id, slice.id, file_space.id, H5P_DEFAULT, pointers.data()) < 0)
        fail("cannot read dataset " + dataset);
      bool too_much = false;
      for (std::size_t k = 0; k < count; ++k) {  // HDF5 allocated each string: copy it, then give it back
        char* p = pointers[k];
        std::size_t const length = p ? std::strlen(p) : 0;
        total += length;
        too_much = too_much || total > kMaxTotal;
        if (!too_much) values.emplace_back(p ? p : "", length);
        if (p) H5free_memory(p);
      }
      if (too_much)
        fail("dataset " + dataset + " of " + std::to_string(n) + " strings holds more than " +
             bytes_text(double(kMaxTotal)) + " of text (a forged file: its strings may all name one stored string)");
    }
    return values;
  }
  std::size_t const width = H5Tget_size(type.id);
  std::size_t bytes = 0;
  if (!checked_bytes(shape, width, &bytes) || bytes == std::numeric_limits<std::size_t>::max())
    fail("dataset " + dataset + " of " + std::to_string(n) + " strings is too large to read");
  std::vector<char> buffer = allocate<char>(*this, bytes + 1, dataset);
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
// Opens an attribute that must hold exactly one value: reading several into one would write past
// the value (a forged file must not do that), and one with none has nothing to read.
Handle open_attribute(H5File const& f, hid_t file, std::string const& object,
                      std::string const& name) {
  hid_t const a = H5Aopen_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0) throw H5Error(f.path() + ": no attribute '" + name + "' on " + object);
  hssize_t n = -1;
  {
    Handle space{H5Aget_space(a), H5Sclose};
    if (space.id >= 0) n = H5Sget_simple_extent_npoints(space.id);
  }
  if (n != 1) {
    H5Aclose(a);
    throw H5Error(f.path() + ": attribute '" + name + "' on " + object + " holds " +
                  (n < 0 ? std::string("an unreadable number of") : std::to_string(n)) + " values, expected one");
  }
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
    if (H5Aread(a.id, mem.id, &s) < 0 || !s) fail("cannot read attribute '" + name + "' on " + object);
    std::string value = s;
    H5free_memory(s);
    return value;
  }
  std::size_t const width = H5Tget_size(type.id);
  if (width == 0 || width >= (std::size_t(1) << 31))
    fail("attribute '" + name + "' on " + object + " is a string of " + std::to_string(width) + " bytes");
  std::vector<char> buf = allocate<char>(*this, width + 1, "attribute '" + name + "' on " + object);
  if (H5Aread(a.id, type.id, buf.data()) < 0) fail("cannot read attribute '" + name + "' on " + object);
  return std::string(buf.data());
}

long long H5File::attribute_int(std::string const& object, std::string const& name) const {
  Handle a = open_attribute(*this, id_, object, name);
  Handle type{H5Aget_type(a.id), H5Tclose};
  if (H5Tget_class(type.id) != H5T_INTEGER)
    fail("attribute '" + name + "' on " + object + " is " + describe(type.id) + ", expected an integer");
  long long value = 0;
  if (H5Aread(a.id, H5T_NATIVE_LLONG, &value) < 0) fail("cannot read attribute '" + name + "' on " + object);
  return value;
}

double H5File::attribute_double(std::string const& object, std::string const& name) const {
  Handle a = open_attribute(*this, id_, object, name);
  Handle type{H5Aget_type(a.id), H5Tclose};
  if (H5Tget_class(type.id) != H5T_FLOAT && H5Tget_class(type.id) != H5T_INTEGER)
    fail("attribute '" + name + "' on " + object + " is " + describe(type.id) + ", expected a number");
  double value = 0;
  if (H5Aread(a.id, H5T_NATIVE_DOUBLE, &value) < 0) fail("cannot read attribute '" + name + "' on " + object);
  return value;
}

void H5File::flush() {
  if (H5Fflush(id_, H5F_SCOPE_GLOBAL) < 0) fail("cannot flush");
}

void H5File::close() {
  if (id_ < 0) return;
  hid_t const id = id_;
  id_ = -1;  // never closed twice, even if closing fails
  // Not closed when the flush fails: see close_quietly.
  if (H5Fflush(id, H5F_SCOPE_GLOBAL) < 0) fail("cannot write the file to the disk");
  if (H5Fclose(id) < 0) fail("cannot close the file");
}

void verify_h5(std::string const& path) {
  H5File const f(path, H5File::Mode::read);
  // Walked by name (H5Oopen + H5Iget_type), the same on HDF5 1.10 through 1.14.
  std::vector<std::string> datasets, objects{"/"};
  std::function<void(std::string const&)> walk = [&](std::string const& group) {
    for (auto const& child : f.children(group)) {
      std::string const object = (group == "/" ? "/" : group + "/") + child;
      Handle o{H5Oopen(f.id_, object.c_str(), H5P_DEFAULT), H5Oclose};
      if (o.id < 0) f.fail("cannot open " + object);
      objects.push_back(object);
      if (H5Iget_type(o.id) == H5I_GROUP) walk(object);
      else if (H5Iget_type(o.id) == H5I_DATASET) datasets.push_back(object);
    }
  };
  walk("/");
  auto const read_raw = [&](hid_t type, hid_t space, std::string const& what, auto const& read) {
    Handle native{H5Tget_native_type(type, H5T_DIR_DEFAULT), H5Tclose};
    hssize_t const n = H5Sget_simple_extent_npoints(space);
    if (native.id < 0 || n < 0) f.fail("cannot read " + what);
    std::vector<unsigned char> bytes(std::size_t(n) * H5Tget_size(native.id) + 1);
    if (n > 0 && read(native.id, bytes.data()) < 0) f.fail("cannot read " + what);
  };
  for (auto const& name : datasets) {
    Handle d{H5Dopen2(f.id_, name.c_str(), H5P_DEFAULT), H5Dclose};
    if (d.id < 0) f.fail("cannot open dataset " + name);
    Handle type{H5Dget_type(d.id), H5Tclose}, space{H5Dget_space(d.id), H5Sclose};
    if (H5Tget_class(type.id) == H5T_STRING) {
      f.read_strings(name);
      continue;
    }
    read_raw(type.id, space.id, "dataset " + name, [&](hid_t mem, void* out) {
      return H5Dread(d.id, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out);
    });
  }
  for (auto const& object : objects) {
    Handle o{H5Oopen(f.id_, object.c_str(), H5P_DEFAULT), H5Oclose};
    if (o.id < 0) f.fail("cannot open " + object);
    std::vector<std::string> names;
    hsize_t at = 0;
    auto const add = [](hid_t, char const* name, H5A_info_t const*, void* out) -> herr_t {
      static_cast<std::vector<std::string>*>(out)->push_back(name);
      return 0;
    };
    if (H5Aiterate2(o.id, H5_INDEX_NAME, H5_ITER_INC, &at, add, &names) < 0) f.fail("cannot list the attributes of " + object);
    for (auto const& attribute : names) {
      Handle a{H5Aopen(o.id, attribute.c_str(), H5P_DEFAULT), H5Aclose};
      if (a.id < 0) f.fail("cannot open attribute '" + attribute + "' of " + object);
      Handle type{H5Aget_type(a.id), H5Tclose}, space{H5Aget_space(a.id), H5Sclose};
      if (H5Tget_class(type.id) == H5T_STRING) {
        f.attribute_string(object, attribute);
        continue;
      }
      read_raw(type.id, space.id, "attribute '" + attribute + "' of " + object,
               [&](hid_t mem, void* out) { return H5Aread(a.id, mem, out); });
    }
  }
}

}  // namespace joule::io

// In sanitizer builds (tests/fuzz), a sanitizer's report in the child ends the child through this
// callback, quietly (no crash artifact of the fuzzer's for a crash that was contained); elsewhere
// the weak symbol is null.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace joule::io {

namespace {
void child_died() { ::_exit(86); }
}  // namespace

void (*testing::after_guard_child)(InputFile const& in) = nullptr;

double read_timeout_for(InputFile const& in) {
  double const bytes = double(in.identity().size);
  double const base = core_environment::kReadTimeout.value();  // JOULE_READ_TIMEOUT, 60 s unset
  return base + bytes / 20e6;
}

ChildRead read_in_child(InputFile const& in, std::function<void()> const& work, double timeout_s) {
  std::string const& path = in.path();
  if (!core_environment::kReadGuard.value()) return {};  // JOULE_READ_GUARD=off
  int fds[2];
  if (::pipe(fds) != 0) return {};
  std::fflush(nullptr);  // nothing buffered is written twice
  pid_t const pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {};
  }
  if (pid == 0) {  // the child: do the reading, report, and leave without running any exit handlers
    ::close(fds[0]);
    // A crash ends the child at once: no handler of the parent's (a test framework's, a
    // sanitizer's) runs on in it; a sanitizer's own reports end it through child_died.
    for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(signal, SIG_DFL);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(child_died);
    std::string message;
    int code = 0;
    try {
      work();
    } catch (std::exception const& e) {
      message = e.what();
      code = 3;
    } catch (...) {
      message = path + ": reading failed with an unknown exception";
      code = 3;
    }
    for (std::size_t done = 0; done < message.size();) {
      ssize_t const n = ::write(fds[1], message.data() + done, message.size() - done);
      if (n <= 0) break;
      done += std::size_t(n);
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  std::string message;
  bool timed_out = false;
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int const ready = ::poll(&p, 1, int(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buffer[4096];
    ssize_t const n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file: the child is done
    message.append(buffer, std::size_t(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3g", timeout_s);
  if (timed_out)
    throw H5Error(path + ": reading this file did not finish within " + seconds +
                  " s (the HDF5 library hangs on it): the file is damaged or forged, and nothing of it was used");
  if (WIFSIGNALED(status))
    throw H5Error(path + ": reading this file crashed the HDF5 library (signal " + std::to_string(WTERMSIG(status)) +
                  ", " + strsignal(WTERMSIG(status)) + "): the file is damaged or forged, and nothing of it was used");
  if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3))
    throw H5Error(path + ": reading this file crashed the HDF5 library (the reading process ended with status " +
                  std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : status) +
                  "): the file is damaged or forged, and nothing of it was used");
  ChildRead result;
  result.ran = true;
  result.threw = WEXITSTATUS(status) == 3;
  result.message = std::move(message);
  if (testing::after_guard_child) testing::after_guard_child(in);
  return result;
}

}  // namespace joule::io
