// fp4d::h5 implementation: see h5.hpp for the conventions.
#include "trace/h5.hpp"

#include <hdf5.h>
#include <hdf5_hl.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>

#include "util/checked_size.hpp"

namespace fp4d::h5 {

static_assert(std::is_same_v<Id, hid_t>, "fp4d::h5::Id must be hid_t");
static_assert(std::is_same_v<std::uint64_t, hsize_t> || sizeof(hsize_t) == sizeof(std::uint64_t),
              "hsize_t must be 64-bit");

namespace {

namespace fs = std::filesystem;
using detail::Handle;

// No library clean-up at process exit: after a failed H5Fclose (a full disk) HDF5 keeps the
// file's identifiers, and its atexit handler would flush them again and crash in doing so.
// Every file is closed by its owner (File's destructor), so there is nothing left for it.
const bool no_hdf5_atexit = [] {
  H5dont_atexit();
  return true;
}();

// HDF5 prints its error stack to stderr by default; our exceptions replace it. The
// Debian library is built thread-safe, where this setting is per thread.
void silence() {
  thread_local bool done = false;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

// The innermost (most specific) description on the current error stack, or "".
std::string hdf5_message() {
  std::string msg;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto* s = static_cast<std::string*>(data);
        if (s->empty() && e != nullptr && e->desc != nullptr && e->desc[0] != '\0') {
          *s = e->desc;
          return 1;  // stop
        }
        return 0;
      },
      &msg);
  return msg;
}

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

// HDF5's file-driver messages span lines ("file write failed: time = <ctime>\n, filename =
// ..., errno = 28, error message = 'No space left on device', ..."): keep what a user needs,
// on one line.
std::string one_line(std::string detail) {
  const std::string tag = "error message = '";
  const std::size_t m = detail.find(tag);
  if (m != std::string::npos) {
    const std::size_t b = m + tag.size(), e = detail.find('\'', b);
    const std::size_t colon = detail.find(':');
    detail = (colon != std::string::npos && colon < m ? detail.substr(0, colon + 1) + " " : std::string()) +
             detail.substr(b, e == std::string::npos ? std::string::npos : e - b);
  }
  for (char& c : detail)
    if (c == '\n' || c == '\r') c = ' ';
  return detail;
}

// True when a failed HDF5 call ran out of space: errno as the call left it, or the errno that
// HDF5's file driver quotes in its message (other library calls may have reset errno since).
bool out_of_space(int err, const std::string& detail) {
  return err == ENOSPC || detail.find("errno = 28,") != std::string::npos;
}

// Throws with the innermost HDF5 message appended; a write that failed for want of space
// throws DiskFull (the caller's data is intact up to its last durable point, and the cure is
// space, not other input).
[[noreturn]] void fail_h5(const std::string& msg) {
  const int err = errno;
  std::string detail = hdf5_message();
  H5Eclear2(H5E_DEFAULT);
  if (out_of_space(err, detail))
    throw DiskFull(msg + ": no space left on device");
  if (detail.empty()) throw Error(msg);
  throw Error(msg + ": " + one_line(detail));
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

// Normalised absolute path of `name` relative to group path `base`.
std::string join(const std::string& base, const std::string& name) {
  std::string full = (!name.empty() && name[0] == '/') ? name : base + "/" + name;
  std::string out;
  std::size_t i = 0;
  while (i < full.size()) {
    std::size_t j = full.find('/', i);
    if (j == std::string::npos) j = full.size();
    std::string part = full.substr(i, j - i);
    if (!part.empty() && part != ".") out += "/" + part;
    i = j + 1;
  }
  return out.empty() ? "/" : out;
}

// Name to hand to HDF5 (relative to a location): "" means the location itself.
const char* h5name(const std::string& name) { return name.empty() ? "." : name.c_str(); }

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i <= path.size()) {
    std::size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (!part.empty() && part != ".") parts.push_back(part);
    i = j + 1;
  }
  return parts;
}

std::uint64_t product(const Dims& dims, const std::string& what) {
  std::uint64_t n = 1;
  for (auto d : dims) {
    if (d != 0 && n > std::numeric_limits<std::uint64_t>::max() / d)
      fail(what + ": dimensions overflow");
    n *= d;
  }
  return n;
}

std::vector<hsize_t> to_hsize(const Dims& d) { return std::vector<hsize_t>(d.begin(), d.end()); }

std::string dims_str(const Dims& d) {
  std::string s = "{";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}

// ---- types --------------------------------------------------------------------------

template <class T>
hid_t mem_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int8_t>) return H5T_NATIVE_INT8;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, std::int16_t>) return H5T_NATIVE_INT16;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return H5T_NATIVE_UINT16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return H5T_NATIVE_INT64;
  else return H5T_NATIVE_UINT64;
}

template <class T>
hid_t file_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_IEEE_F32LE;
  else if constexpr (std::is_same_v<T, double>) return H5T_IEEE_F64LE;
  else if constexpr (std::is_same_v<T, std::int8_t>) return H5T_STD_I8LE;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return H5T_STD_U8LE;
  else if constexpr (std::is_same_v<T, std::int16_t>) return H5T_STD_I16LE;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return H5T_STD_U16LE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return H5T_STD_I32LE;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return H5T_STD_U32LE;
  else if constexpr (std::is_same_v<T, std::int64_t>) return H5T_STD_I64LE;
  else return H5T_STD_U64LE;
}

template <class T>
std::string cpp_name() {
  if constexpr (std::is_floating_point_v<T>) return "float" + std::to_string(8 * sizeof(T));
  else return std::string(std::is_signed_v<T> ? "int" : "uint") + std::to_string(8 * sizeof(T));
}

std::string type_name(hid_t t) {
  switch (H5Tget_class(t)) {
    case H5T_FLOAT: return "float" + std::to_string(8 * H5Tget_size(t));
    case H5T_INTEGER:
      return std::string(H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") +
             std::to_string(8 * H5Tget_size(t));
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "vlen";
    case H5T_OPAQUE: return "opaque";
    case H5T_REFERENCE: return "reference";
    case H5T_BITFIELD: return "bitfield";
    case H5T_TIME: return "time";
    default: return "unknown type";
  }
}

// ---- property lists -----------------------------------------------------------------

Handle make_plist(hid_t cls, const std::string& what) {
  Handle p(H5Pcreate(cls));
  if (!p.valid()) fail_h5(what + ": cannot create a property list");
  return p;
}

// Link creation: make missing intermediate groups, names are UTF-8.
Handle link_plist(const std::string& what) {
  Handle p = make_plist(H5P_LINK_CREATE, what);
  if (H5Pset_create_intermediate_group(p.get(), 1) < 0 ||
      H5Pset_char_encoding(p.get(), H5T_CSET_UTF8) < 0)
    fail_h5(what);
  return p;
}

Handle file_access_plist(const std::string& what) {
  Handle p = make_plist(H5P_FILE_ACCESS, what);
  if (H5Pset_fclose_degree(p.get(), H5F_CLOSE_STRONG) < 0) fail_h5(what);
  return p;
}

// Chunk shape of about 256 KiB, never larger than dims: repeatedly halve the largest
// chunk dimension (the leading one on ties, keeping the trailing contiguous ones long).
std::vector<hsize_t> choose_chunk(const Dims& dims, std::size_t elsize) {
  constexpr std::uint64_t kTarget = 256 * 1024;
  std::vector<hsize_t> c(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) c[i] = std::max<std::uint64_t>(dims[i], 1);
  auto bytes = [&] {
    long double b = static_cast<long double>(elsize);
    for (auto x : c) b *= static_cast<long double>(x);
    return b;
  };
  while (bytes() > static_cast<long double>(kTarget)) {
    std::size_t k = 0;
    for (std::size_t i = 1; i < c.size(); ++i)
      if (c[i] > c[k]) k = i;
    if (c[k] <= 1) break;
    c[k] = (c[k] + 1) / 2;
  }
  return c;
}

// ---- object kind ----------------------------------------------------------------------

H5I_type_t object_type(hid_t loc, const std::string& name) {
  hid_t o = H5Oopen(loc, h5name(name), H5P_DEFAULT);
  if (o < 0) {
    H5Eclear2(H5E_DEFAULT);
    return H5I_BADID;
  }
  H5I_type_t t = H5Iget_type(o);
  H5Oclose(o);
  return t;
}

std::string kind_name(H5I_type_t t) {
  switch (t) {
    case H5I_GROUP: return "group";
    case H5I_DATASET: return "dataset";
    case H5I_DATATYPE: return "named datatype";
    default: return "object";
  }
}

// ---- attributes -----------------------------------------------------------------------

struct AttrData {
  Handle attr, type, space;
  H5T_class_t cls = H5T_NO_CLASS;
  hssize_t npoints = 0;
};

}  // namespace

// ---- Handle ---------------------------------------------------------------------------

namespace detail {
Handle::Handle(const Handle& o) : id_(-1) {
  if (o.id_ >= 0) {
    silence();
    if (H5Iinc_ref(o.id_) >= 0) id_ = o.id_;
  }
}
Handle& Handle::operator=(const Handle& o) {
  if (this != &o) {
    Handle tmp(o);
    *this = std::move(tmp);
  }
  return *this;
}
Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    o.id_ = -1;
  }
  return *this;
}
void Handle::reset() noexcept {
  if (id_ >= 0) {
    silence();
    if (H5Idec_ref(id_) < 0) H5Eclear2(H5E_DEFAULT);  // e.g. already closed with its file
    id_ = -1;
  }
}
}  // namespace detail

// Checked: declared dims whose product wraps (2^33 x 2^31 is 0 modulo 2^64) must not pass
// for an empty or small dataset. SizeError (bad input) names the dims.
std::uint64_t DatasetInfo::elements() const {
  std::uint64_t n = 1;
  for (auto d : dims) n = checked_mul_u64(n, d, "dataset of dims " + dims_str(dims));
  return n;
}

// ---- Node: attributes -----------------------------------------------------------------

std::string Node::what_() const {
  std::string kind = "object";
  if (h_.valid()) {
    H5I_type_t t = H5Iget_type(h_.get());
    if (t == H5I_GROUP) kind = "group";
    else if (t == H5I_DATASET) kind = "dataset";
    else if (t == H5I_BADID) H5Eclear2(H5E_DEFAULT);
  }
  return kind + " " + quote(path_) + " in " + quote(file_path_);
}

namespace {

void check_open(const Node& n, const std::string& what) {
  if (!n.valid()) fail(what + ": invalid handle (default-constructed or its file is closed)");
}

void write_attr(hid_t obj, const std::string& name, hid_t type, hid_t space, const void* buf,
                const std::string& what) {
  std::string msg = "cannot set attribute " + quote(name) + " on " + what;
  htri_t ex = H5Aexists(obj, name.c_str());
  if (ex < 0) fail_h5(msg);
  if (ex > 0 && H5Adelete(obj, name.c_str()) < 0) fail_h5(msg + " (deleting the old value)");
  Handle acpl = make_plist(H5P_ATTRIBUTE_CREATE, msg);
  if (H5Pset_char_encoding(acpl.get(), H5T_CSET_UTF8) < 0) fail_h5(msg);
  Handle a(H5Acreate2(obj, name.c_str(), type, space, acpl.get(), H5P_DEFAULT));
  if (!a.valid()) fail_h5(msg);
  if (H5Awrite(a.get(), type, buf) < 0) fail_h5(msg);
}

template <class V>
void write_attr_vector(hid_t obj, const std::string& name, hid_t type, const std::vector<V>& v,
                       const std::string& what) {
  hsize_t n = v.size();
  Handle space(H5Screate_simple(1, &n, nullptr));
  if (!space.valid()) fail_h5("cannot set attribute " + quote(name) + " on " + what);
  const V dummy{};  // HDF5 rejects a null buffer even for zero elements
  write_attr(obj, name, type, space.get(), v.empty() ? &dummy : v.data(), what);
}

template <class V>
void write_attr_scalar(hid_t obj, const std::string& name, hid_t type, const V& v,
                       const std::string& what) {
  Handle space(H5Screate(H5S_SCALAR));
  if (!space.valid()) fail_h5("cannot set attribute " + quote(name) + " on " + what);
  write_attr(obj, name, type, space.get(), &v, what);
}

AttrData open_attr(hid_t obj, const std::string& name, const std::string& what) {
  htri_t ex = H5Aexists(obj, name.c_str());
  if (ex < 0) fail_h5("cannot read attribute " + quote(name) + " of " + what);
  if (ex == 0) fail("attribute " + quote(name) + " not found on " + what);
  AttrData d;
  d.attr = Handle(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  if (!d.attr.valid()) fail_h5("cannot open attribute " + quote(name) + " of " + what);
  d.type = Handle(H5Aget_type(d.attr.get()));
  d.space = Handle(H5Aget_space(d.attr.get()));
  if (!d.type.valid() || !d.space.valid())
    fail_h5("cannot inspect attribute " + quote(name) + " of " + what);
  d.cls = H5Tget_class(d.type.get());
  d.npoints = H5Sget_simple_extent_npoints(d.space.get());
  if (d.npoints < 0) fail_h5("cannot inspect attribute " + quote(name) + " of " + what);
  return d;
}

std::string attr_what(const std::string& name, const std::string& what) {
  return "attribute " + quote(name) + " of " + what;
}

void expect_scalar(const AttrData& d, const std::string& name, const std::string& what) {
  if (d.npoints != 1)
    fail(attr_what(name, what) + " has " + std::to_string(d.npoints) +
         " elements, expected a single value");
}

std::vector<double> read_attr_doubles(const AttrData& d, const std::string& name,
                                      const std::string& what) {
  if (d.cls != H5T_FLOAT && d.cls != H5T_INTEGER)
    fail(attr_what(name, what) + " is " + type_name(d.type.get()) + ", expected a number");
  std::vector<double> out(static_cast<std::size_t>(d.npoints));
  if (!out.empty() && H5Aread(d.attr.get(), H5T_NATIVE_DOUBLE, out.data()) < 0)
    fail_h5("cannot read " + attr_what(name, what));
  return out;
}

// Integer (or enum over an integer) attribute values. Values come back as int64 when the
// stored type is signed or narrower than 64 bits, else as uint64 (is_u64).
struct IntValues {
  std::vector<std::int64_t> s;
  std::vector<std::uint64_t> u;
  bool is_u64 = false;
  std::size_t size() const { return is_u64 ? u.size() : s.size(); }
};

IntValues read_attr_ints(const AttrData& d, const std::string& name, const std::string& what) {
  if (d.cls != H5T_INTEGER && d.cls != H5T_ENUM)
    fail(attr_what(name, what) + " is " + type_name(d.type.get()) + ", expected an integer");
  const std::size_t n = static_cast<std::size_t>(d.npoints);
  IntValues v;
  Handle base;  // integer type of the values
  if (d.cls == H5T_ENUM) {
    base = Handle(H5Tget_super(d.type.get()));
    if (!base.valid()) fail_h5("cannot read " + attr_what(name, what));
  } else {
    base = Handle(H5Tcopy(d.type.get()));
  }
  if (H5Tget_class(base.get()) != H5T_INTEGER)
    fail(attr_what(name, what) + " is an enum over a non-integer type");
  v.is_u64 = H5Tget_sign(base.get()) == H5T_SGN_NONE && H5Tget_size(base.get()) >= 8;
  hid_t dst = v.is_u64 ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64;
  if (n == 0) return v;
  std::vector<std::uint64_t> buf(n);
  if (d.cls == H5T_INTEGER) {
    if (H5Aread(d.attr.get(), dst, buf.data()) < 0) fail_h5("cannot read " + attr_what(name, what));
  } else {
    // HDF5 does not convert enum -> integer: read the raw enum values in their native
    // base type, then convert those.
    Handle mem(H5Tget_native_type(d.type.get(), H5T_DIR_ASCEND));
    Handle mem_base(mem.valid() ? H5Tget_super(mem.get()) : -1);
    if (!mem_base.valid()) fail_h5("cannot read " + attr_what(name, what));
    std::size_t esz = std::max<std::size_t>(H5Tget_size(mem.get()), 8);
    std::vector<unsigned char> raw(n * esz);
    if (H5Aread(d.attr.get(), mem.get(), raw.data()) < 0 ||
        H5Tconvert(mem_base.get(), dst, n, raw.data(), nullptr, H5P_DEFAULT) < 0)
      fail_h5("cannot read " + attr_what(name, what));
    std::memcpy(buf.data(), raw.data(), n * 8);
  }
  if (v.is_u64) {
    v.u = std::move(buf);
  } else {
    v.s.resize(n);
    std::memcpy(v.s.data(), buf.data(), n * 8);
  }
  return v;
}

std::int64_t to_int64(const IntValues& v, std::size_t i, const std::string& name,
                      const std::string& what) {
  if (!v.is_u64) return v.s[i];
  if (v.u[i] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    fail(attr_what(name, what) + " = " + std::to_string(v.u[i]) + " does not fit in int64");
  return static_cast<std::int64_t>(v.u[i]);
}

}  // namespace

void Node::set_attr(const std::string& name, const std::string& value) {
  silence();
  check_open(*this, "cannot set attribute " + quote(name));
  if (value.find('\0') != std::string::npos)
    fail("cannot set attribute " + quote(name) + " on " + what_() +
         ": string contains a NUL character");
  Handle t(H5Tcopy(H5T_C_S1));
  if (!t.valid() || H5Tset_size(t.get(), H5T_VARIABLE) < 0 ||
      H5Tset_cset(t.get(), H5T_CSET_UTF8) < 0)
    fail_h5("cannot set attribute " + quote(name) + " on " + what_());
  const char* p = value.c_str();
  write_attr_scalar(h_.get(), name, t.get(), p, what_());
}

void Node::set_attr(const std::string& name, const char* value) {
  if (value == nullptr) fail("cannot set attribute " + quote(name) + " on " + what_() + ": null string");
  set_attr(name, std::string(value));
}

void Node::set_attr(const std::string& name, double value) {
  silence();
  check_open(*this, "cannot set attribute " + quote(name));
  write_attr_scalar(h_.get(), name, H5T_NATIVE_DOUBLE, value, what_());
}

void Node::set_attr(const std::string& name, float value) {
  silence();
  check_open(*this, "cannot set attribute " + quote(name));
  write_attr_scalar(h_.get(), name, H5T_NATIVE_FLOAT, value, what_());
}

void Node::set_attr(const std::string& name, bool value) {
  silence();
  check_open(*this, "cannot set attribute " + quote(name));
  // h5py's boolean type: enum over int8 {FALSE = 0, TRUE = 1}.
  Handle t(H5Tenum_create(H5T_NATIVE_INT8));
  std::int8_t f = 0, tr = 1;
  if (!t.valid() || H5Tenum_insert(t.get(), "FALSE", &f) < 0 ||
      H5Tenum_insert(t.get(), "TRUE", &tr) < 0)
    fail_h5("cannot set attribute " + quote(name) + " on " + what_());
  std::int8_t v = value ? 1 : 0;
  write_attr_scalar(h_.get(), name, t.get(), v, what_());
}

void Node::set_attr(const std::string& name, std::int64_t value) {
  silence();
  check_open(*this, "cannot set attribute " + quote(name));
  write_attr_scalar(h_.get(), name, H5T_NATIVE_INT64, value, what_());
}

void Node::set_attr(const std::string& name, std::uint64_t value) {
  silence();
  check_open(*this, "cannot set attribute " + quote(name));
  write_attr_scalar(h_.get(), name, H5T_NATIVE_UINT64, value, what_());
}

void Node::set_attr(const std::string& name, const std::vector<double>& value) {
  silence();
  check_open(*this, "cannot set attribute " + quote(name));
  write_attr_vector(h_.get(), name, H5T_NATIVE_DOUBLE, value, what_());
}

void Node::set_attr(const std::string& name, const std::vector<std::int64_t>& value) {
  silence();
  check_open(*this, "cannot set attribute " + quote(name));
  write_attr_vector(h_.get(), name, H5T_NATIVE_INT64, value, what_());
}

bool Node::has_attr(const std::string& name) const {
  silence();
  check_open(*this, "cannot look up attribute " + quote(name));
  htri_t ex = H5Aexists(h_.get(), name.c_str());
  if (ex < 0) fail_h5("cannot look up attribute " + quote(name) + " of " + what_());
  return ex > 0;
}

std::vector<std::string> Node::attr_names() const {
  silence();
  check_open(*this, "cannot list attributes");
  std::vector<std::string> names;
  hsize_t idx = 0;
  herr_t r = H5Aiterate2(
      h_.get(), H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t, const char* n, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(n);
        return 0;
      },
      &names);
  if (r < 0) fail_h5("cannot list attributes of " + what_());
  return names;
}

void Node::delete_attr(const std::string& name) {
  silence();
  check_open(*this, "cannot delete attribute " + quote(name));
  if (!has_attr(name)) fail("cannot delete attribute " + quote(name) + " of " + what_() + ": not found");
  if (H5Adelete(h_.get(), name.c_str()) < 0)
    fail_h5("cannot delete attribute " + quote(name) + " of " + what_());
}

std::string Node::get_attr_string(const std::string& name) const {
  silence();
  check_open(*this, "cannot read attribute " + quote(name));
  const std::string what = what_();
  AttrData d = open_attr(h_.get(), name, what);
  if (d.cls != H5T_STRING)
    fail(attr_what(name, what) + " is " + type_name(d.type.get()) + ", expected a string");
  expect_scalar(d, name, what);
  htri_t vl = H5Tis_variable_str(d.type.get());
  if (vl < 0) fail_h5("cannot read " + attr_what(name, what));
  Handle mem(H5Tcopy(H5T_C_S1));
  if (!mem.valid() || H5Tset_cset(mem.get(), H5Tget_cset(d.type.get())) < 0)
    fail_h5("cannot read " + attr_what(name, what));
  if (vl > 0) {
    if (H5Tset_size(mem.get(), H5T_VARIABLE) < 0) fail_h5("cannot read " + attr_what(name, what));
    char* p = nullptr;
    if (H5Aread(d.attr.get(), mem.get(), &p) < 0) fail_h5("cannot read " + attr_what(name, what));
    std::string s = p ? std::string(p) : std::string();
    if (p) H5free_memory(p);
    return s;
  }
  std::size_t size = H5Tget_size(d.type.get());
  if (size == 0) fail_h5("cannot read " + attr_what(name, what));
  if (H5Tset_size(mem.get(), size) < 0 || H5Tset_strpad(mem.get(), H5T_STR_NULLPAD) < 0)
    fail_h5("cannot read " + attr_what(name, what));
  std::vector<char> buf(size + 1, '\0');
  if (H5Aread(d.attr.get(), mem.get(), buf.data()) < 0) fail_h5("cannot read " + attr_what(name, what));
  std::string s(buf.data(), std::strlen(buf.data()));
  if (H5Tget_strpad(d.type.get()) == H5T_STR_SPACEPAD)
    s.erase(s.find_last_not_of(' ') + 1);
  return s;
}

double Node::get_attr_double(const std::string& name) const {
  silence();
  check_open(*this, "cannot read attribute " + quote(name));
  const std::string what = what_();
  AttrData d = open_attr(h_.get(), name, what);
  expect_scalar(d, name, what);
  return read_attr_doubles(d, name, what)[0];
}

std::vector<double> Node::get_attr_double_vector(const std::string& name) const {
  silence();
  check_open(*this, "cannot read attribute " + quote(name));
  const std::string what = what_();
  AttrData d = open_attr(h_.get(), name, what);
  return read_attr_doubles(d, name, what);
}

std::int64_t Node::get_attr_int64(const std::string& name) const {
  silence();
  check_open(*this, "cannot read attribute " + quote(name));
  const std::string what = what_();
  AttrData d = open_attr(h_.get(), name, what);
  expect_scalar(d, name, what);
  return to_int64(read_attr_ints(d, name, what), 0, name, what);
}

std::vector<std::int64_t> Node::get_attr_int64_vector(const std::string& name) const {
  silence();
  check_open(*this, "cannot read attribute " + quote(name));
  const std::string what = what_();
  AttrData d = open_attr(h_.get(), name, what);
  IntValues v = read_attr_ints(d, name, what);
  std::vector<std::int64_t> out(v.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_int64(v, i, name, what);
  return out;
}

std::uint64_t Node::get_attr_uint64(const std::string& name) const {
  silence();
  check_open(*this, "cannot read attribute " + quote(name));
  const std::string what = what_();
  AttrData d = open_attr(h_.get(), name, what);
  expect_scalar(d, name, what);
  IntValues v = read_attr_ints(d, name, what);
  if (v.is_u64) return v.u[0];
  if (v.s[0] < 0)
    fail(attr_what(name, what) + " = " + std::to_string(v.s[0]) + " does not fit in uint64");
  return static_cast<std::uint64_t>(v.s[0]);
}

bool Node::get_attr_bool(const std::string& name) const {
  silence();
  check_open(*this, "cannot read attribute " + quote(name));
  const std::string what = what_();
  AttrData d = open_attr(h_.get(), name, what);
  expect_scalar(d, name, what);
  IntValues v = read_attr_ints(d, name, what);
  return v.is_u64 ? v.u[0] != 0 : v.s[0] != 0;
}

// ---- Dataset --------------------------------------------------------------------------

DatasetInfo Dataset::info() const {
  silence();
  check_open(*this, "cannot inspect dataset " + quote(path_));
  DatasetInfo info;
  Handle t(H5Dget_type(h_.get()));
  Handle s(H5Dget_space(h_.get()));
  if (!t.valid() || !s.valid()) fail_h5("cannot inspect " + what_());
  H5T_class_t cls = H5Tget_class(t.get());
  info.type_class = cls == H5T_FLOAT     ? TypeClass::Float
                    : cls == H5T_INTEGER ? TypeClass::Integer
                                         : TypeClass::Other;
  info.element_size = H5Tget_size(t.get());
  info.is_signed = cls == H5T_INTEGER && H5Tget_sign(t.get()) != H5T_SGN_NONE;
  info.type_name = type_name(t.get());
  int rank = H5Sget_simple_extent_ndims(s.get());
  if (rank < 0) fail_h5("cannot inspect " + what_());
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(s.get(), d.data(), nullptr) < 0)
    fail_h5("cannot inspect " + what_());
  info.dims.assign(d.begin(), d.end());
  if (H5Sget_simple_extent_type(s.get()) == H5S_NULL) info.dims = {0};
  return info;
}

template <Element T>
std::vector<T> Dataset::read(Dims* dims) const {
  silence();
  check_open(*this, "cannot read dataset " + quote(path_));
  const std::string what = what_();
  Handle t(H5Dget_type(h_.get()));
  if (!t.valid()) fail_h5("cannot read " + what);
  H5T_class_t cls = H5Tget_class(t.get());
  constexpr bool want_float = std::is_floating_point_v<T>;
  if (cls != (want_float ? H5T_FLOAT : H5T_INTEGER))
    fail(what + " is " + type_name(t.get()) + ", expected " +
         (want_float ? "a floating-point type" : "an integer type") + " (reading as " +
         cpp_name<T>() + ")");
  DatasetInfo inf = info();
  std::uint64_t n = product(inf.dims, "cannot read " + what);
  if (n > std::vector<T>().max_size()) fail("cannot read " + what + ": too large");
  std::vector<T> out(static_cast<std::size_t>(n));
  if (n > 0 && H5Dread(h_.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    fail_h5("cannot read " + what + " as " + cpp_name<T>());
  if (dims) *dims = inf.dims;
  return out;
}

template <Element T>
void Dataset::rewrite(const T* data, std::uint64_t n) {
  silence();
  check_open(*this, "cannot write dataset " + quote(path_));
  const std::string what = what_();
  const DatasetInfo inf = info();
  const std::uint64_t have = product(inf.dims, "cannot write " + what);
  if (n != have)
    fail("cannot rewrite " + what + ": " + std::to_string(n) + " values for " + std::to_string(have) + " elements");
  if (n > 0 && (data == nullptr || H5Dwrite(h_.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0))
    fail_h5("cannot rewrite " + what);
}

namespace {
std::string base_name(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
}  // namespace

void Dataset::make_scale() {
  silence();
  check_open(*this, "cannot make dataset " + quote(path_) + " a dimension scale");
  const std::string msg = "cannot make " + what_() + " a dimension scale";
  if (info().dims.size() != 1) fail(msg + ": it is not one-dimensional");
  if (H5DSset_scale(h_.get(), base_name(path_).c_str()) < 0) fail_h5(msg);
}

bool Dataset::is_scale() const {
  silence();
  check_open(*this, "cannot inspect dataset " + quote(path_));
  const htri_t r = H5DSis_scale(h_.get());
  if (r < 0) fail_h5("cannot inspect " + what_());
  return r > 0;
}

void Dataset::attach_scale(const Dataset& scale, unsigned axis) {
  silence();
  check_open(*this, "cannot attach a dimension scale to dataset " + quote(path_));
  check_open(scale, "cannot attach dimension scale " + quote(scale.path()));
  const std::string msg = "cannot attach " + quote(scale.path()) + " to axis " + std::to_string(axis) + " of " + what_();
  if (axis >= info().dims.size()) fail(msg + ": it has " + std::to_string(info().dims.size()) + " axes");
  if (!scale.is_scale()) fail(msg + ": it is not a dimension scale");
  if (is_scale()) fail(msg + ": the dataset is itself a dimension scale");
  if (H5DSattach_scale(h_.get(), scale.id(), axis) < 0 ||
      H5DSset_label(h_.get(), axis, base_name(scale.path()).c_str()) < 0)
    fail_h5(msg);
}

std::vector<std::string> Dataset::dimension_labels() const {
  silence();
  check_open(*this, "cannot inspect dataset " + quote(path_));
  const std::size_t rank = info().dims.size();
  std::vector<std::string> out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const auto axis = static_cast<unsigned>(i);
    const ssize_t n = H5DSget_label(h_.get(), axis, nullptr, 0);
    if (n < 0) fail_h5("cannot read the axis labels of " + what_());
    if (n == 0) continue;
    std::string label(static_cast<std::size_t>(n) + 1, '\0');
    if (H5DSget_label(h_.get(), axis, label.data(), label.size()) < 0) fail_h5("cannot read the axis labels of " + what_());
    label.resize(static_cast<std::size_t>(n));
    out[i] = std::move(label);
  }
  return out;
}

// ---- Group ----------------------------------------------------------------------------

Group Group::create_group(const std::string& name) {
  silence();
  check_open(*this, "cannot create group " + quote(name));
  const std::string full = join(path_, name);
  const std::string msg = "cannot create group " + quote(full) + " in " + quote(file_path_);
  if (exists(name)) fail(msg + ": it already exists");
  Handle lcpl = link_plist(msg);
  Handle g(H5Gcreate2(h_.get(), h5name(name), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!g.valid()) fail_h5(msg);
  return Group(std::move(g), file_path_, full);
}

Group Group::open_group(const std::string& name) const {
  silence();
  check_open(*this, "cannot open group " + quote(name));
  const std::string full = join(path_, name);
  if (!exists(name)) fail("group " + quote(full) + " not found in " + quote(file_path_));
  H5I_type_t t = object_type(h_.get(), name);
  if (t != H5I_GROUP)
    fail(quote(full) + " in " + quote(file_path_) + " is a " + kind_name(t) + ", not a group");
  Handle g(H5Gopen2(h_.get(), h5name(name), H5P_DEFAULT));
  if (!g.valid()) fail_h5("cannot open group " + quote(full) + " in " + quote(file_path_));
  return Group(std::move(g), file_path_, full);
}

Group Group::require_group(const std::string& name) {
  return exists(name) ? open_group(name) : create_group(name);
}

bool Group::exists(const std::string& path) const {
  silence();
  check_open(*this, "cannot look up " + quote(path));
  std::vector<std::string> parts = split(path);
  if (parts.empty()) return true;  // "", ".", "/"
  std::string prefix = (!path.empty() && path[0] == '/') ? "/" : "";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    prefix += (i ? "/" : "") + parts[i];
    htri_t r = H5Lexists(h_.get(), prefix.c_str(), H5P_DEFAULT);
    if (r <= 0) {  // < 0: a parent is not a group
      if (r < 0) H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  htri_t r = H5Oexists_by_name(h_.get(), prefix.c_str(), H5P_DEFAULT);  // dangling links
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

bool Group::is_group(const std::string& path) const {
  return exists(path) && object_type(h_.get(), path) == H5I_GROUP;
}

bool Group::is_dataset(const std::string& path) const {
  return exists(path) && object_type(h_.get(), path) == H5I_DATASET;
}

std::vector<std::string> Group::children() const {
  silence();
  check_open(*this, "cannot list group");
  std::vector<std::string> names;
  hsize_t idx = 0;
  herr_t r = H5Literate(
      h_.get(), H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t, const char* n, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(n);
        return 0;
      },
      &names);
  if (r < 0) fail_h5("cannot list " + what_());
  return names;
}

namespace {
// H5Aiterate2 rather than the object info's count: H5Oget_info's signature differs between
// HDF5 1.10 and 1.12+.
void check_attributes(hid_t obj, const std::string& what) {
  hsize_t idx = 0;
  const herr_t r = H5Aiterate2(
      obj, H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t o, const char* name, const H5A_info_t*, void*) -> herr_t {
        const hid_t a = H5Aopen(o, name, H5P_DEFAULT);
        if (a < 0) return -1;
        H5Aclose(a);
        return 0;
      },
      nullptr);
  if (r < 0) fail_h5("cannot read the attributes of " + what);
}
}  // namespace

void Group::check_readable() const {
  silence();
  check_open(*this, "cannot check group " + quote(path_));
  check_attributes(h_.get(), what_());
  for (const std::string& name : children()) {
    const std::string full = join(path_, name);
    Handle o(H5Oopen(h_.get(), name.c_str(), H5P_DEFAULT));
    if (!o.valid()) fail_h5("cannot open " + quote(full) + " in " + quote(file_path_));
    if (H5Iget_type(o.get()) == H5I_GROUP) open_group(name).check_readable();
    else check_attributes(o.get(), quote(full) + " in " + quote(file_path_));
  }
}

void Group::check_size_(const std::string& name, std::size_t n, const Dims& dims) const {
  std::uint64_t want = product(dims, "cannot write dataset " + quote(join(path_, name)));
  if (want != n)
    fail("cannot write dataset " + quote(join(path_, name)) + " in " + quote(file_path_) +
         ": " + std::to_string(n) + " values for dims " + dims_str(dims));
}

template <Element T>
void Group::write(const std::string& name, const T* data, const Dims& dims,
                  const WriteOptions& opts) {
  silence();
  check_open(*this, "cannot write dataset " + quote(name));
  const std::string full = join(path_, name);
  const std::string msg = "cannot write dataset " + quote(full) + " in " + quote(file_path_);
  if (dims.size() > H5S_MAX_RANK) fail(msg + ": rank " + std::to_string(dims.size()) + " > 32");
  const std::uint64_t n = product(dims, msg);
  if (n > 0 && data == nullptr) fail(msg + ": null data");
  if (exists(name)) {
    H5I_type_t t = object_type(h_.get(), name);
    if (!opts.overwrite) fail(msg + ": a " + kind_name(t) + " of that name exists");
    if (t != H5I_DATASET) fail(msg + ": a " + kind_name(t) + " of that name exists");
    if (H5Ldelete(h_.get(), name.c_str(), H5P_DEFAULT) < 0) fail_h5(msg + " (removing the old one)");
  }
  std::vector<hsize_t> hd = to_hsize(dims);
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr));
  if (!space.valid()) fail_h5(msg);
  Handle dcpl = make_plist(H5P_DATASET_CREATE, msg);
  if (opts.compress && n > 4096) {
    std::vector<hsize_t> chunk = choose_chunk(dims, sizeof(T));
    if (H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0 ||
        H5Pset_shuffle(dcpl.get()) < 0 || H5Pset_deflate(dcpl.get(), 4) < 0 || H5Pset_fletcher32(dcpl.get()) < 0)
      fail_h5(msg + " (compression settings)");
  }
  Handle lcpl = link_plist(msg);
  Handle ds(H5Dcreate2(h_.get(), name.c_str(), file_type<T>(), space.get(), lcpl.get(),
                       dcpl.get(), H5P_DEFAULT));
  if (!ds.valid()) fail_h5(msg);
  if (n > 0 && H5Dwrite(ds.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail_h5(msg);
}

Dataset Group::open_dataset(const std::string& name) const {
  silence();
  check_open(*this, "cannot open dataset " + quote(name));
  const std::string full = join(path_, name);
  if (!exists(name)) fail("dataset " + quote(full) + " not found in " + quote(file_path_));
  H5I_type_t t = object_type(h_.get(), name);
  if (t != H5I_DATASET)
    fail(quote(full) + " in " + quote(file_path_) + " is a " + kind_name(t) + ", not a dataset");
  Handle d(H5Dopen2(h_.get(), name.c_str(), H5P_DEFAULT));
  if (!d.valid()) fail_h5("cannot open dataset " + quote(full) + " in " + quote(file_path_));
  return Dataset(std::move(d), file_path_, full);
}

template <Element T>
Appendable<T> Group::create_appendable(const std::string& name, Dims row_shape,
                                       std::uint64_t chunk_rows) {
  silence();
  check_open(*this, "cannot create appendable dataset " + quote(name));
  const std::string full = join(path_, name);
  const std::string msg =
      "cannot create appendable dataset " + quote(full) + " in " + quote(file_path_);
  if (row_shape.size() + 1 > H5S_MAX_RANK) fail(msg + ": rank too large");
  for (auto d : row_shape)
    if (d == 0) fail(msg + ": row shape " + dims_str(row_shape) + " has a zero extent");
  const std::uint64_t row_bytes = product(row_shape, msg) * sizeof(T);
  if (row_bytes > (std::uint64_t{1} << 31)) fail(msg + ": rows too large for a chunk");
  if (chunk_rows == 0) chunk_rows = std::max<std::uint64_t>(1, (64 * 1024) / row_bytes);
  if (chunk_rows > (std::uint64_t{1} << 32) - 1 || chunk_rows * row_bytes > (std::uint64_t{1} << 31))
    fail(msg + ": chunk of " + std::to_string(chunk_rows) + " rows is too large");
  if (exists(name)) fail(msg + ": a " + kind_name(object_type(h_.get(), name)) + " of that name exists");

  std::vector<hsize_t> dims{0}, maxdims{H5S_UNLIMITED}, chunk{chunk_rows};
  for (auto d : row_shape) {
    dims.push_back(d);
    maxdims.push_back(d);
    chunk.push_back(d);
  }
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data()));
  if (!space.valid()) fail_h5(msg);
  Handle dcpl = make_plist(H5P_DATASET_CREATE, msg);
  if (H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0 ||
      H5Pset_shuffle(dcpl.get()) < 0 || H5Pset_deflate(dcpl.get(), 4) < 0 || H5Pset_fletcher32(dcpl.get()) < 0)
    fail_h5(msg + " (chunk/compression settings)");
  Handle lcpl = link_plist(msg);
  Handle ds(H5Dcreate2(h_.get(), name.c_str(), file_type<T>(), space.get(), lcpl.get(),
                       dcpl.get(), H5P_DEFAULT));
  if (!ds.valid()) fail_h5(msg);
  return Appendable<T>(Dataset(std::move(ds), file_path_, full), std::move(row_shape));
}

template <Element T>
Appendable<T> Group::open_appendable(const std::string& name) {
  Dataset d = open_dataset(name);
  const std::string msg = "cannot append " + cpp_name<T>() + " to " + d.what_();
  Handle t(H5Dget_type(d.id()));
  Handle s(H5Dget_space(d.id()));
  if (!t.valid() || !s.valid()) fail_h5(msg);
  const bool same_type = H5Tget_class(t.get()) == H5Tget_class(file_type<T>()) &&
                         H5Tget_size(t.get()) == sizeof(T) &&
                         (std::is_floating_point_v<T> ||
                          (H5Tget_sign(t.get()) == H5T_SGN_NONE) == std::is_unsigned_v<T>);
  if (!same_type) fail(msg + ": it is " + type_name(t.get()));
  int rank = H5Sget_simple_extent_ndims(s.get());
  if (rank < 1) fail(msg + ": it is not appendable (scalar)");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank)), maxdims(dims.size());
  if (H5Sget_simple_extent_dims(s.get(), dims.data(), maxdims.data()) < 0) fail_h5(msg);
  if (maxdims[0] != H5S_UNLIMITED)
    fail(msg + ": it is not appendable (first dimension is not unlimited)");
  return Appendable<T>(std::move(d), Dims(dims.begin() + 1, dims.end()));
}

// ---- Appendable -----------------------------------------------------------------------

template <Element T>
std::uint64_t Appendable<T>::row_elements() const noexcept {
  std::uint64_t n = 1;
  for (auto d : row_shape_) n *= d;
  return n;
}

template <Element T>
std::uint64_t Appendable<T>::rows() const {
  silence();
  check_open(*this, "cannot query dataset " + quote(path_));
  Handle s(H5Dget_space(h_.get()));
  if (!s.valid()) fail_h5("cannot query " + what_());
  std::vector<hsize_t> dims(row_shape_.size() + 1);
  if (H5Sget_simple_extent_ndims(s.get()) != static_cast<int>(dims.size()) ||
      H5Sget_simple_extent_dims(s.get(), dims.data(), nullptr) < 0)
    fail_h5("cannot query " + what_());
  return dims[0];
}

template <Element T>
void Appendable<T>::append(const T* rows_data, std::uint64_t nrows) {
  silence();
  check_open(*this, "cannot append to dataset " + quote(path_));
  const std::string msg = "cannot append to " + what_();
  if (nrows == 0) return;
  if (rows_data == nullptr) fail(msg + ": null data");
  const std::uint64_t old = rows();
  std::vector<hsize_t> dims{old + nrows}, start{old}, count{nrows};
  for (auto d : row_shape_) {
    dims.push_back(d);
    start.push_back(0);
    count.push_back(d);
  }
  if (H5Dset_extent(h_.get(), dims.data()) < 0) fail_h5(msg + " (extending)");
  Handle fspace(H5Dget_space(h_.get()));
  Handle mspace(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr));
  bool ok = fspace.valid() && mspace.valid() &&
            H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                                nullptr) >= 0 &&
            H5Dwrite(h_.get(), mem_type<T>(), mspace.get(), fspace.get(), H5P_DEFAULT, rows_data) >= 0;
  if (!ok) {
    const int err = errno;
    std::string detail = hdf5_message();
    dims[0] = old;  // do not leave fill-value rows behind
    H5Dset_extent(h_.get(), dims.data());
    H5Eclear2(H5E_DEFAULT);
    if (out_of_space(err, detail))
      throw DiskFull(msg + ": no space left on device");
    fail(msg + (detail.empty() ? "" : ": " + one_line(detail)));
  }
}

template <Element T>
void Appendable<T>::truncate(std::uint64_t keep) {
  silence();
  check_open(*this, "cannot truncate dataset " + quote(path_));
  const std::uint64_t have = rows();
  if (keep > have) fail("cannot truncate " + what_() + " to " + std::to_string(keep) + " rows: it has " + std::to_string(have));
  std::vector<hsize_t> dims{keep};
  for (auto d : row_shape_) dims.push_back(d);
  if (H5Dset_extent(h_.get(), dims.data()) < 0) fail_h5("cannot truncate " + what_());
}

template <Element T>
void Appendable<T>::append(const std::vector<T>& data) {
  const std::uint64_t re = row_elements();
  if (data.size() % re != 0)
    fail("cannot append to " + what_() + ": " + std::to_string(data.size()) +
         " values is not a multiple of the row size " + std::to_string(re));
  append(data.data(), data.size() / re);
}

template <Element T>
void Appendable<T>::flush() {
  silence();
  check_open(*this, "cannot flush dataset " + quote(path_));
  if (H5Fflush(h_.get(), H5F_SCOPE_LOCAL) < 0) fail_h5("cannot flush " + quote(file_path_));
}

// ---- File -----------------------------------------------------------------------------

namespace {
// The format SWMR needs, pinned at 1.10 at both ends: a newer library writing its own latest
// object versions would make traces that HDF5 1.10 (Debian 12's) cannot read.
void set_swmr_format(hid_t fapl, const std::string& what) {
  if (H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) fail_h5(what + " (file format)");
}

// HDF5 keeps the superblock's "open for writing" flags of a killed writer; h5clear clears them
// through this file-access property, which the library registers but does not declare.
constexpr const char* kClearStatusFlags = "clear_status_flags";

// Whether another process holds a flock on path that conflicts with opening it for writing
// (any lock) or for reading (an exclusive one), as HDF5's own file locking would find.
bool locked_by_another(const std::string& path, bool rw) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool busy = ::flock(fd, (rw ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the probe's own lock, if it got one
  return busy;
}

unsigned superblock_version(hid_t file, const std::string& what) {
  H5F_info2_t info;
  if (H5Fget_info2(file, &info) < 0) fail_h5(what);
  return info.super.version;
}
}  // namespace

File File::create(const std::string& path, Format format) {
  silence();
  const std::string msg = "cannot create " + quote(path);
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec))
    fail(msg + ": directory " + quote(parent.string()) + " does not exist");
  if (fs::is_directory(path, ec)) fail(msg + ": it is a directory");
  Handle fapl = file_access_plist(msg);
  if (format == Format::Swmr) set_swmr_format(fapl.get(), msg);
  Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!f.valid()) fail_h5(msg);
  return File(std::move(f), path);
}

File File::open_(const std::string& path, bool rw, bool clear_stale_writer, bool lock) {
  silence();
  const std::string msg = "cannot open " + quote(path) + (rw ? " for writing" : " for reading");
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(msg + ": no such file");
  if (fs::is_directory(path, ec)) fail(msg + ": it is a directory");
  if (H5Fis_hdf5(path.c_str()) == 0) fail(msg + ": not an HDF5 file");
  H5Eclear2(H5E_DEFAULT);
  Handle fapl = file_access_plist(msg);
  if (clear_stale_writer) {
    const htri_t known = H5Pexist(fapl.get(), kClearStatusFlags);
    hbool_t yes = true;
    if (known > 0 && H5Pset(fapl.get(), kClearStatusFlags, &yes) < 0) fail_h5(msg);
    H5Eclear2(H5E_DEFAULT);  // a library without the property opens as with Refuse
  }
  if (!lock && H5Pset_file_locking(fapl.get(), false, true) < 0) fail_h5(msg + " (file locking)");
  const unsigned mode = rw ? H5F_ACC_RDWR : H5F_ACC_RDONLY;
  Handle f(H5Fopen(path.c_str(), mode, fapl.get()));
  // HDF5 takes a flock on the file (exclusive to write, shared to read) and fails the open when
  // another process holds a conflicting one. A reader opening the file holds it for an instant:
  // wait up to about two seconds for such a lock to pass; a lock held longer is another
  // process's open file, which is not damage and must not be treated as such. A failed open
  // whose lock is already gone when probed (let go between the open and the probe) is tried
  // once more at once: only a failure with no lock in the way is the file's own.
  for (int attempt = 0; lock && !f.valid() && attempt < 20; ++attempt) {
    const bool held = locked_by_another(path, rw);
    H5Eclear2(H5E_DEFAULT);
    if (held) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    f = Handle(H5Fopen(path.c_str(), mode, fapl.get()));
    if (!held) break;
  }
  if (!f.valid() && lock && locked_by_another(path, rw)) {
    H5Eclear2(H5E_DEFAULT);
    throw FileInUse(msg + ": another process has it open (an HDF5 reader such as h5py or HDFView, or a run still "
                    "writing it); close it there and try again - nothing was changed");
  }
  if (!f.valid()) fail_h5(msg);
  // Opened in the earliest format, a 1.10 file would get older object versions for what is
  // added to it, and could not start SWMR writing.
  if (rw && superblock_version(f.get(), msg) >= 3 && H5Fset_libver_bounds(f.get(), H5F_LIBVER_V110, H5F_LIBVER_V110) < 0)
    fail_h5(msg + " (file format)");
  return File(std::move(f), path);
}

File File::open_read(const std::string& path) { return open_(path, false, false, true); }
File File::open_rw(const std::string& path, StaleWriter stale, FileLock lock) {
  return open_(path, true, stale == StaleWriter::Clear, lock == FileLock::Take);
}

void File::start_swmr_write() {
  silence();
  const std::string msg = "cannot start SWMR writing of " + quote(path_);
  if (!h_.valid()) fail(msg + ": file is closed");
  if (!swmr_format()) fail(msg + ": it is not in the HDF5 1.10 format (h5::Format::Swmr)");
  if (H5Fstart_swmr_write(h_.get()) < 0) fail_h5(msg);
}

bool File::swmr_format() const {
  silence();
  if (!h_.valid()) fail("cannot inspect " + quote(path_) + ": file is closed");
  return superblock_version(h_.get(), "cannot inspect " + quote(path_)) >= 3;
}

bool File::swmr_writing() const {
  silence();
  if (!h_.valid()) return false;
  unsigned intent = 0;
  if (H5Fget_intent(h_.get(), &intent) < 0) fail_h5("cannot inspect " + quote(path_));
  return (intent & H5F_ACC_SWMR_WRITE) != 0;
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    try {
      close();
    } catch (...) {
    }
    h_ = std::move(o.h_);
    path_ = std::move(o.path_);
  }
  return *this;
}

File::~File() {
  try {
    close();
  } catch (...) {
  }
}

Group File::root() const {
  silence();
  if (!h_.valid()) fail("cannot open the root group of " + quote(path_) + ": file is closed");
  Handle g(H5Gopen2(h_.get(), "/", H5P_DEFAULT));
  if (!g.valid()) fail_h5("cannot open the root group of " + quote(path_));
  return Group(std::move(g), path_, "/");
}

void File::flush() {
  silence();
  if (!h_.valid()) fail("cannot flush " + quote(path_) + ": file is closed");
  if (H5Fflush(h_.get(), H5F_SCOPE_GLOBAL) < 0) fail_h5("cannot flush " + quote(path_));
}

void File::sync() {
  flush();
  // H5Fflush hands the bytes to the kernel; fsync makes them survive a power loss. Any
  // descriptor of the file serves (Linux syncs the inode), so HDF5's own is not needed.
  const int fd = ::open(path_.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot sync " + quote(path_) + ": " + std::strerror(errno));
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  if (rc != 0) {
    if (err == ENOSPC) throw DiskFull("cannot sync " + quote(path_) + ": no space left on device");
    fail("cannot sync " + quote(path_) + ": " + std::strerror(err));
  }
}

void File::sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail("cannot sync directory " + quote(dir) + ": " + std::strerror(errno));
  ::fsync(fd);  // some file systems refuse fsync on a directory; the rename is then as durable as they make it
  ::close(fd);
}

void File::close() {
  if (!h_.valid()) return;
  silence();
  Id id = h_.release();
  if (H5Fclose(id) < 0) fail_h5("error closing " + quote(path_));
}

// ---- AtomicOutput ---------------------------------------------------------------------

AtomicOutput::AtomicOutput(std::string final_path)
    : final_(std::move(final_path)), temp_(final_ + ".partial") {}

AtomicOutput::AtomicOutput(AtomicOutput&& o) noexcept
    : final_(std::move(o.final_)), temp_(std::move(o.temp_)), committed_(o.committed_),
      active_(o.active_) {
  o.active_ = false;
}

AtomicOutput::~AtomicOutput() {
  if (active_ && !committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

namespace {
// True if HDF5 in this process still has `path` open.
bool hdf5_has_open(const std::string& path) {
  silence();
  ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE);
  if (n <= 0) return false;
  std::vector<hid_t> ids(static_cast<std::size_t>(n));
  n = H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_FILE, ids.size(), ids.data());
  std::error_code ec;
  for (ssize_t i = 0; i < n; ++i) {
    ssize_t len = H5Fget_name(ids[static_cast<std::size_t>(i)], nullptr, 0);
    if (len <= 0) continue;
    std::string name(static_cast<std::size_t>(len) + 1, '\0');
    H5Fget_name(ids[static_cast<std::size_t>(i)], name.data(), name.size());
    name.resize(static_cast<std::size_t>(len));
    if (name == path || fs::equivalent(name, path, ec)) return true;
  }
  H5Eclear2(H5E_DEFAULT);
  return false;
}

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}
}  // namespace

void AtomicOutput::commit() {
  const std::string msg = "cannot commit " + quote(final_);
  if (!active_) fail(msg + ": moved-from AtomicOutput");
  if (committed_) fail(msg + ": already committed");
  std::error_code ec;
  if (!fs::exists(temp_, ec)) fail(msg + ": " + quote(temp_) + " does not exist");
  if (hdf5_has_open(temp_)) fail(msg + ": " + quote(temp_) + " is still open (close the File first)");
  fsync_path(temp_, O_RDONLY);
  fs::rename(temp_, final_, ec);
  if (ec) fail(msg + ": rename from " + quote(temp_) + " failed: " + ec.message());
  fs::path dir = fs::path(final_).parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), O_RDONLY | O_DIRECTORY);
  committed_ = true;
}

// ---- explicit instantiations ------------------------------------------------------------

#define FP4D_H5_INSTANTIATE(T)                                                                 \
  template std::vector<T> Dataset::read<T>(Dims*) const;                                       \
  template void Dataset::rewrite<T>(const T*, std::uint64_t);                                  \
  template void Group::write<T>(const std::string&, const T*, const Dims&, const WriteOptions&); \
  template Appendable<T> Group::create_appendable<T>(const std::string&, Dims, std::uint64_t); \
  template Appendable<T> Group::open_appendable<T>(const std::string&);                        \
  template class Appendable<T>;

FP4D_H5_INSTANTIATE(float)
FP4D_H5_INSTANTIATE(double)
FP4D_H5_INSTANTIATE(std::int8_t)
FP4D_H5_INSTANTIATE(std::uint8_t)
FP4D_H5_INSTANTIATE(std::int16_t)
FP4D_H5_INSTANTIATE(std::uint16_t)
FP4D_H5_INSTANTIATE(std::int32_t)
FP4D_H5_INSTANTIATE(std::uint32_t)
FP4D_H5_INSTANTIATE(std::int64_t)
FP4D_H5_INSTANTIATE(std::uint64_t)

#undef FP4D_H5_INSTANTIATE

}  // namespace fp4d::h5
