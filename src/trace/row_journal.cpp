#include "trace/row_journal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "trace/h5.hpp"

namespace fp4d {

namespace {

[[noreturn]] void io_error(const std::string& what, const std::string& path, int err) {
  if (err == ENOSPC) throw h5::DiskFull(what + " '" + path + "': no space left on device");
  throw std::runtime_error(what + " '" + path + "': " + std::strerror(err));
}

void write_all(int fd, const std::string& path, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      io_error("cannot write", path, errno);
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Sequential reads of [0, end) of a file, in blocks.
class Reader {
 public:
  Reader(int fd, const std::string& path, std::uint64_t end) : fd_(fd), path_(path), end_(end) {}
  std::uint64_t offset() const { return pos_; }
  bool at_end() const { return pos_ == end_; }
  // Reads n bytes or throws: a truncated entry inside the journal's counted length is damage.
  void read(void* into, std::uint64_t n) {
    if (end_ - pos_ < n) throw std::runtime_error("journal '" + path_ + "' ends inside an entry");
    auto* p = static_cast<char*>(into);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(pos_));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw std::runtime_error("cannot read journal '" + path_ + "'" + (r < 0 ? ": " + std::string(std::strerror(errno)) : ": it is shorter than its checkpoint says"));
      p += r, pos_ += static_cast<std::uint64_t>(r), n -= static_cast<std::uint64_t>(r);
    }
  }

 private:
  int fd_;
  const std::string& path_;
  std::uint64_t end_, pos_ = 0;
};

}  // namespace

std::string journal_header(const std::string& run_id) { return "fp4drift.rows 1 " + run_id + "\n"; }

RowJournal RowJournal::create(const std::string& path, const std::string& run_id) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error("cannot create", path, errno);
  RowJournal j(path, fd, 0, Fnv1a64());
  const std::string h = journal_header(run_id);
  j.buffer_ = h;
  j.digest_.add(h.data(), h.size());
  j.sync();
  return j;
}

RowJournal RowJournal::reopen(const std::string& path, const std::string& run_id, std::uint64_t length, std::uint64_t digest) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw std::runtime_error("its journal '" + path + "' is missing");
    io_error("cannot open", path, errno);
  }
  RowJournal j(path, fd, length, Fnv1a64());
  const std::string h = journal_header(run_id);
  struct stat st {};
  if (::fstat(fd, &st) != 0) io_error("cannot stat", path, errno);
  if (static_cast<std::uint64_t>(st.st_size) < length)
    throw std::runtime_error("its journal '" + path + "' holds " + std::to_string(st.st_size) + " bytes, its checkpoint counts " +
                             std::to_string(length));
  Reader r(fd, path, length);
  std::string head(std::min<std::uint64_t>(h.size(), length), '\0');
  r.read(head.data(), head.size());
  if (head != h) throw std::runtime_error("journal '" + path + "' belongs to another run");
  j.digest_.add(head.data(), head.size());
  std::vector<char> block(1 << 20);
  while (!r.at_end()) {
    const std::uint64_t n = std::min<std::uint64_t>(block.size(), length - r.offset());
    r.read(block.data(), n);
    j.digest_.add(block.data(), n);
  }
  if (j.digest_.value() != digest) throw std::runtime_error("journal '" + path + "' does not match its checkpoint's digest");
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0) io_error("cannot truncate", path, errno);
  if (::lseek(fd, 0, SEEK_END) < 0) io_error("cannot seek in", path, errno);
  return j;
}

RowJournal::RowJournal(RowJournal&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), length_(o.length_), digest_(o.digest_), buffer_(std::move(o.buffer_)) {
  o.fd_ = -1;
}

RowJournal::~RowJournal() {
  if (fd_ >= 0) ::close(fd_);
}

void RowJournal::put(char kind, const std::string& dataset, const void* values, std::uint64_t count) {
  if (dataset.size() > 0xFFFF) throw std::invalid_argument("journal: dataset name too long: " + dataset.substr(0, 64));
  const std::size_t at = buffer_.size();
  const auto len = static_cast<std::uint16_t>(dataset.size());
  buffer_.push_back(kind);
  buffer_.append(reinterpret_cast<const char*>(&len), sizeof len);
  buffer_.append(dataset);
  buffer_.append(reinterpret_cast<const char*>(&count), sizeof count);
  buffer_.append(static_cast<const char*>(values), count * 8);
  digest_.add(buffer_.data() + at, buffer_.size() - at);
}

void RowJournal::append(const std::string& dataset, const std::vector<double>& values) {
  put('d', dataset, values.data(), values.size());
}
void RowJournal::append(const std::string& dataset, const std::vector<std::int64_t>& values) {
  put('i', dataset, values.data(), values.size());
}

void RowJournal::sync() {
  if (!buffer_.empty()) {
    // On a failed write the file may hold part of the buffer past length_: the checkpoint
    // still counts length_, and a resume cuts the rest off.
    write_all(fd_, path_, buffer_.data(), buffer_.size());
    length_ += buffer_.size();
    buffer_.clear();
  }
  if (::fsync(fd_) != 0) io_error("cannot sync", path_, errno);
}

void RowJournal::replay(std::uint64_t length, const Visitor& f) const {
  if (!buffer_.empty()) throw std::logic_error("journal: replay with unsynced entries");
  Reader r(fd_, path_, length);
  for (char c = 0; c != '\n';) r.read(&c, 1);  // the header (checked by reopen)
  std::vector<double> d;
  std::vector<std::int64_t> i;
  while (!r.at_end()) {
    char kind = 0;
    std::uint16_t len = 0;
    std::uint64_t count = 0;
    r.read(&kind, 1);
    r.read(&len, sizeof len);
    std::string name(len, '\0');
    r.read(name.data(), len);
    r.read(&count, sizeof count);
    if (count > (length - r.offset()) / 8) throw std::runtime_error("journal '" + path_ + "' ends inside an entry");
    if (kind == 'd') {
      d.resize(count);
      r.read(d.data(), count * 8);
      f(name, &d, nullptr);
    } else if (kind == 'i') {
      i.resize(count);
      r.read(i.data(), count * 8);
      f(name, nullptr, &i);
    } else {
      throw std::runtime_error("journal '" + path_ + "' has an entry of unknown kind");
    }
  }
}

}  // namespace fp4d
