// fp4d::h5 - a small RAII layer over the HDF5 C API (1.10), used for every file fp4drift
// reads or writes (tensors, quantizer outputs, per-step traces).
//
// This header does not include <hdf5.h>: HDF5 identifiers appear as `Id` (checked
// against hid_t in h5.cpp) and every template is explicitly instantiated in h5.cpp for
// the element types listed in `Element`.
//
// Ownership
//   File         move-only. Opened with H5F_CLOSE_STRONG: File::close() (or ~File)
//                closes the file for real, together with every Group/Dataset/Appendable
//                opened through it; such handles outliving their File become invalid
//                (their operations throw Error; destroying them is harmless).
//   Group, Dataset, Appendable<T>
//                ref-counted and copyable (copies share one HDF5 identifier through
//                H5Iinc_ref; the last one closes it). Appendable keeps no state besides
//                the identifier: the row count is read from the file on every call.
//   Not thread-safe: use one File (and its handles) from one thread at a time.
//
// Errors: every failure throws h5::Error with a message naming the file, the object and
// the operation, plus the innermost HDF5 message where it helps. HDF5's own error-stack
// printing is switched off (per thread: the Debian build is thread-safe).
//
// Names: relative names resolve against the group ("a/b/x"), absolute ones ("/a/x")
// against the file root. Creating a group, dataset or appendable creates missing
// intermediate groups.
//
// Storage conventions (what h5py sees)
//   numbers      little-endian IEEE float32/float64, std integers of the C++ width.
//   strings      scalar attributes, variable-length, UTF-8 (h5py: str). Reading also
//                accepts fixed-length and ASCII strings.
//   bool         attribute of h5py's bool type: an enum over int8 {FALSE = 0, TRUE = 1}
//                (h5py: numpy.bool_). get_attr_bool/get_attr_int64 read it, and
//                get_attr_bool reads any integer attribute (non-zero = true).
//   datasets     compressed (gzip level 4 + shuffle + Fletcher32 checksum, chunked, chunks
//                ~256 KiB and never larger than the dims) when WriteOptions::compress and
//                > 4096 elements; contiguous otherwise. dims {} writes a scalar dataset.
//   appendable   first dimension unlimited, chunked, gzip 4 + shuffle + Fletcher32 (a chunk
//                damaged on disk fails to read instead of giving wrong numbers).
//   file format  HDF5's default (earliest) format: readable by any HDF5 >= 1.8 and h5py;
//                attributes are limited to 64 KiB each (store larger data as datasets).
//                Format::Swmr files (long runs' traces) are in the HDF5 1.10 format instead,
//                which SWMR needs (see File::start_swmr_write); HDF5 >= 1.10 reads them.
#pragma once

#include <concepts>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace fp4d::h5 {

using Id = std::int64_t;  // == hid_t (static_assert in h5.cpp)
using Dims = std::vector<std::uint64_t>;

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file could not be opened because another process holds HDF5's lock on it (a reader, or a
// writer such as a run still going), after waiting briefly for a lock that is only being
// passed. Not an Error: the file is fine, and nothing was changed; try again once the other
// process lets go.
class FileInUse : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A write failed because the file system is full (ENOSPC). Not an Error: the input was fine,
// and what was written before the last durable point (File::sync) is intact.
class DiskFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Element types of datasets and appendables (explicitly instantiated in h5.cpp).
template <class T>
concept Element = std::same_as<T, float> || std::same_as<T, double> ||
                  std::same_as<T, std::int8_t> || std::same_as<T, std::uint8_t> ||
                  std::same_as<T, std::int16_t> || std::same_as<T, std::uint16_t> ||
                  std::same_as<T, std::int32_t> || std::same_as<T, std::uint32_t> ||
                  std::same_as<T, std::int64_t> || std::same_as<T, std::uint64_t>;

struct WriteOptions {
  bool compress = true;    // gzip 4 + shuffle, chunked, when the dataset has > 4096 elements
  bool overwrite = false;  // replace an existing dataset of that name (else: Error); HDF5
                           // does not reclaim the old one's space in the file
};

enum class TypeClass { Float, Integer, Other };

struct DatasetInfo {
  Dims dims;                   // {} for a scalar dataset
  TypeClass type_class = TypeClass::Other;
  std::size_t element_size = 0;  // bytes
  bool is_signed = false;        // integers only
  std::string type_name;         // "float32", "int64", "uint8", "string", "compound", ...
  std::uint64_t elements() const;
};

namespace detail {
// An owned reference to an HDF5 identifier: copying adds a reference (H5Iinc_ref),
// destruction drops one (H5Idec_ref).
class Handle {
 public:
  Handle() noexcept = default;
  explicit Handle(Id id) noexcept : id_(id) {}  // takes over one reference
  Handle(const Handle& o);
  Handle& operator=(const Handle& o);
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept;
  ~Handle() { reset(); }
  void reset() noexcept;
  Id release() noexcept {  // gives up ownership without dropping the reference
    Id id = id_;
    id_ = -1;
    return id;
  }
  Id get() const noexcept { return id_; }
  bool valid() const noexcept { return id_ >= 0; }

 private:
  Id id_ = -1;
};
}  // namespace detail

class Group;

// Common to groups and datasets: identity and attributes.
class Node {
 public:
  const std::string& path() const noexcept { return path_; }            // in the file, "/a/b"
  const std::string& file_path() const noexcept { return file_path_; }  // on disk
  Id id() const noexcept { return h_.get(); }                           // raw hid_t
  bool valid() const noexcept { return h_.valid(); }

  // Set (create or overwrite) an attribute. Integers go to int64 (signed) or uint64.
  void set_attr(const std::string& name, const std::string& value);
  void set_attr(const std::string& name, const char* value);
  void set_attr(const std::string& name, double value);
  void set_attr(const std::string& name, float value);
  void set_attr(const std::string& name, bool value);
  void set_attr(const std::string& name, std::int64_t value);
  void set_attr(const std::string& name, std::uint64_t value);
  template <std::integral I>
    requires(!std::same_as<I, bool> && !std::same_as<I, std::int64_t> &&
             !std::same_as<I, std::uint64_t>)
  void set_attr(const std::string& name, I value) {
    if constexpr (std::is_signed_v<I>)
      set_attr(name, static_cast<std::int64_t>(value));
    else
      set_attr(name, static_cast<std::uint64_t>(value));
  }
  void set_attr(const std::string& name, const std::vector<double>& value);      // 1-D float64
  void set_attr(const std::string& name, const std::vector<std::int64_t>& value);  // 1-D int64

  bool has_attr(const std::string& name) const;
  std::vector<std::string> attr_names() const;
  void delete_attr(const std::string& name);  // Error if absent

  // Getters throw Error when the attribute is missing or of an incompatible type.
  // Scalars also accept a one-element 1-D attribute; vectors also accept a scalar.
  std::string get_attr_string(const std::string& name) const;
  double get_attr_double(const std::string& name) const;  // float or integer attribute
  std::int64_t get_attr_int64(const std::string& name) const;    // integer or bool attribute
  std::uint64_t get_attr_uint64(const std::string& name) const;  // integer >= 0 or bool
  bool get_attr_bool(const std::string& name) const;             // bool or integer attribute
  std::vector<double> get_attr_double_vector(const std::string& name) const;
  std::vector<std::int64_t> get_attr_int64_vector(const std::string& name) const;

 protected:
  Node() = default;
  Node(detail::Handle h, std::string file_path, std::string path)
      : h_(std::move(h)), file_path_(std::move(file_path)), path_(std::move(path)) {}
  std::string what_() const;  // "dataset '/x' in 'f.h5'" / "group '/g' in 'f.h5'"

  detail::Handle h_;
  std::string file_path_;
  std::string path_;
  friend class Group;
};

class Dataset : public Node {
 public:
  Dataset() = default;
  DatasetInfo info() const;
  // Reads the whole dataset converted to T (HDF5 does the conversion). The source type
  // class must match T's: float32/float64 -> float/double, any integer -> any integer
  // (out-of-range values are clipped by HDF5). Otherwise Error.
  template <Element T>
  std::vector<T> read(Dims* dims = nullptr) const;
  // Writes n values over the whole dataset in place (n must equal its element count): the
  // same storage is reused, so rewriting a checkpoint does not grow the file.
  template <Element T>
  void rewrite(const T* data, std::uint64_t n);
  template <Element T>
  void rewrite(const std::vector<T>& data) {
    rewrite(data.data(), data.size());
  }

  // Named dimensions, as netCDF-4 stores them (HDF5 dimension scales: h5py's ds.dims,
  // xarray through h5netcdf). make_scale turns this 1-D dataset into the coordinate of the
  // dimension it is named after (netCDF takes a dimension's name from its dataset's name, so
  // the scale's name is the dataset's last path component). attach_scale makes `scale` the
  // coordinate of this dataset's axis `axis` and labels the axis with the scale's name;
  // attaching survives extending or truncating either dataset. Error if this dataset is itself
  // a scale, `scale` is not one, or `axis` is out of range.
  void make_scale();
  bool is_scale() const;
  void attach_scale(const Dataset& scale, unsigned axis);
  // The label of every axis ("" for an unlabelled one), in order.
  std::vector<std::string> dimension_labels() const;

 protected:
  using Node::Node;
  friend class Group;
};

// A dataset of rows: shape {rows, row_shape...}, first dimension unlimited. Every append
// extends and writes through to HDF5 (no buffering here): after File::flush() or
// Appendable::flush() everything appended so far survives a killed process.
template <Element T>
class Appendable : public Dataset {
 public:
  using value_type = T;
  Appendable() = default;
  // Appends nrows rows of row_elements() values each (row-major).
  void append(const T* rows_data, std::uint64_t nrows);
  // data.size() must be a multiple of row_elements().
  void append(const std::vector<T>& data);
  std::uint64_t rows() const;
  // Drops the rows from `rows` on (rows <= rows()): a resumed run discards what came after
  // its checkpoint.
  void truncate(std::uint64_t rows);
  const Dims& row_shape() const noexcept { return row_shape_; }
  std::uint64_t row_elements() const noexcept;
  void flush();  // flushes the whole file (H5Fflush)

 private:
  Appendable(Dataset d, Dims row_shape) : Dataset(std::move(d)), row_shape_(std::move(row_shape)) {}
  Dims row_shape_;
  friend class Group;
};

class Group : public Node {
 public:
  Group() = default;

  Group create_group(const std::string& name);   // Error if it exists
  Group open_group(const std::string& name) const;  // Error if missing / not a group
  Group require_group(const std::string& name);  // open or create

  // True when every component of the (nested) path exists; false if any is missing, or
  // a non-final component is not a group. "" and "." are this group.
  bool exists(const std::string& path) const;
  bool is_group(const std::string& path) const;
  bool is_dataset(const std::string& path) const;
  std::vector<std::string> children() const;  // link names, sorted by name
  // Opens every object below this group and every attribute of them and of it (decoding their
  // headers): Error naming the first that fails. A file torn by a killed writer can hold rows
  // that read back and metadata that does not.
  void check_readable() const;

  // Datasets. dims {} = scalar (one element). Error if the name exists (unless
  // opts.overwrite) or data is null for a non-empty dataset.
  template <Element T>
  void write(const std::string& name, const T* data, const Dims& dims,
             const WriteOptions& opts = {});
  template <Element T>
  void write(const std::string& name, const std::vector<T>& data, const Dims& dims,
             const WriteOptions& opts = {}) {
    check_size_(name, data.size(), dims);
    write(name, data.data(), dims, opts);
  }
  template <Element T>  // 1-D, default options
  void write(const std::string& name, const std::vector<T>& data) {
    write(name, data.data(), Dims{data.size()}, WriteOptions{});
  }

  Dataset open_dataset(const std::string& name) const;
  DatasetInfo info(const std::string& name) const { return open_dataset(name).info(); }
  template <Element T>
  std::vector<T> read(const std::string& name, Dims* dims = nullptr) const {
    return open_dataset(name).read<T>(dims);
  }

  // Appendable datasets. chunk_rows 0 = automatic (~64 KiB chunks).
  template <Element T>
  Appendable<T> create_appendable(const std::string& name, Dims row_shape,
                                  std::uint64_t chunk_rows = 0);
  // Reopens one for appending: Error unless its first dimension is unlimited and its
  // element type is exactly T.
  template <Element T>
  Appendable<T> open_appendable(const std::string& name);

 private:
  using Node::Node;
  void check_size_(const std::string& name, std::size_t n, const Dims& dims) const;
  friend class File;
};

// Compatible: HDF5's earliest format. Swmr: the HDF5 1.10 format (superblock version 3,
// chunk indexes a reader can follow while datasets grow), the only one HDF5 lets a writer
// switch to SWMR in; files made by HDF5 1.8 tools and readers older than 1.10 cannot open it.
enum class Format { Compatible, Swmr };

// What open_rw does with a file whose superblock says a writer has it open (HDF5 1.10 sets
// that flag in a Format::Swmr file while it is open for writing, and a killed writer leaves it
// set): Refuse (HDF5's "file is already open for write"), or Clear it - only for a caller that
// knows the writer is gone and checks what the file holds (a resumed run verifies every row
// against its checkpoint). The flags are not a lock: a live writer elsewhere is not detected.
enum class StaleWriter { Refuse, Clear };

// HDF5's file lock (flock) on open: Take keeps other processes from opening the file for
// writing while it is open here, and fails while a reader holds it - a SWMR reader holds it as
// long as it has the file open. Skip: for the SWMR writer that closed its file to leave SWMR
// mode and opens it again for its last writes, which readers watching the run must not block.
enum class FileLock { Take, Skip };

class File {
 public:
  static File create(const std::string& path, Format format = Format::Compatible);  // truncates an existing file
  static File open_read(const std::string& path);  // read-only
  // Existing file, read-write. A Format::Swmr file is opened in that format, so that anything
  // added to it keeps the format and start_swmr_write() is possible.
  static File open_rw(const std::string& path, StaleWriter stale = StaleWriter::Refuse,
                      FileLock lock = FileLock::Take);

  File() = default;
  File(File&&) noexcept = default;
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();  // closes (errors ignored); call close() to see them

  Group root() const;
  void flush();
  void sync();   // flush(), then fsync: what was written survives a crash or power loss
  // fsync of a directory: a file created or renamed in it survives a power loss.
  static void sync_directory(const std::string& dir);
  void close();  // closes the file and everything opened through it; no-op if closed
  bool is_open() const noexcept { return h_.valid(); }

  // Single-writer/multiple-reader mode (HDF5 1.10): after start_swmr_write() other processes
  // can open the file while it is written (h5py: h5py.File(path, "r", libver="latest",
  // swmr=True), then dataset.refresh() to see new rows), and the file on disk stays readable
  // at every instant as long as the writes reach it in order. Datasets may then only be
  // extended and written: no object or attribute may be created, changed or deleted, so
  // everything the file will hold must exist before. Leaving the mode is closing the file.
  // Error unless the file is open read-write in Format::Swmr (swmr_format()).
  void start_swmr_write();
  bool swmr_format() const;   // the file's superblock is the 1.10 one (version 3 or later)
  bool swmr_writing() const;  // start_swmr_write() was called on this open file
  const std::string& path() const noexcept { return path_; }
  Id id() const noexcept { return h_.get(); }

 private:
  File(detail::Handle h, std::string path) : h_(std::move(h)), path_(std::move(path)) {}
  static File open_(const std::string& path, bool rw, bool clear_stale_writer, bool lock);
  detail::Handle h_;
  std::string path_;
};

// Write-then-rename, so that a partial output never looks complete:
//   h5::AtomicOutput out("run.h5");
//   { auto f = h5::File::create(out.temp_path()); ...; f.close(); }
//   out.commit();            // fsync + rename run.h5.partial -> run.h5
// If commit() is never reached (exception, early return), the destructor deletes the
// .partial file and the final path is left untouched.
class AtomicOutput {
 public:
  explicit AtomicOutput(std::string final_path);
  AtomicOutput(AtomicOutput&& o) noexcept;
  AtomicOutput& operator=(AtomicOutput&&) = delete;
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  ~AtomicOutput();

  const std::string& final_path() const noexcept { return final_; }
  const std::string& temp_path() const noexcept { return temp_; }  // final + ".partial"
  bool committed() const noexcept { return committed_; }
  // Renames temp -> final (replacing final). The File must be closed first (see the
  // overload). Error if the temp file is missing or the rename fails; Error if called twice.
  void commit();
  void commit(File& f) {  // f.close(), then commit()
    f.close();
    commit();
  }

 private:
  std::string final_, temp_;
  bool committed_ = false;
  bool active_ = true;
};

}  // namespace fp4d::h5
