// RowJournal: an append-only file of the rows a long run gives its trace, kept beside it
// (OUT.rows) until the run completes.
//
// Why: HDF5 1.10 updates a file in place - chunk indexes, object headers, a compressed chunk
// moved to new space and its old space reused - so a process killed in the middle of a
// flush can leave a trace whose structure is torn, even though everything before that flush
// had reached the disk. An append-only file cannot be torn that way: whatever was synced
// stays, and a kill can only leave a partial entry at its end. The run's checkpoint records
// the journal's length and digest at the moment it was taken; a resume that finds the trace
// damaged rebuilds it from the journal's entries up to that length.
//
// Format (little-endian, as the machines fp4drift runs on):
//   header   "fp4drift.rows 1 " + run id + "\n"
//   entry    u8 kind ('d': float64, 'i': int64), u16 name length, name (the dataset's path in
//            the trace), u64 value count, the values (8 bytes each)
// Entries are buffered and written at sync(), which also fsyncs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/digest.hpp"

namespace fp4d {

class RowJournal {
 public:
  // A new journal (an existing file is replaced), its header written and synced.
  static RowJournal create(const std::string& path, const std::string& run_id);
  // An existing journal cut back to `length` bytes, after checking that those bytes carry
  // `digest` and the run id; throws std::runtime_error naming what does not match.
  static RowJournal reopen(const std::string& path, const std::string& run_id, std::uint64_t length, std::uint64_t digest);

  RowJournal(RowJournal&& o) noexcept;
  RowJournal& operator=(RowJournal&&) = delete;
  RowJournal(const RowJournal&) = delete;
  RowJournal& operator=(const RowJournal&) = delete;
  ~RowJournal();

  void append(const std::string& dataset, const std::vector<double>& values);
  void append(const std::string& dataset, const std::vector<std::int64_t>& values);
  // Writes what was appended and fsyncs; throws h5::DiskFull when the disk is full (the
  // journal's synced part is unchanged by a failed write: a resume cuts it back).
  void sync();

  std::uint64_t length() const { return length_ + buffer_.size(); }  // bytes, buffered included
  std::uint64_t digest() const { return digest_.value(); }           // of those bytes
  const std::string& path() const { return path_; }

  // Calls f for each entry of the first `length` bytes of a journal, in order.
  using Visitor = std::function<void(const std::string& dataset, const std::vector<double>*, const std::vector<std::int64_t>*)>;
  void replay(std::uint64_t length, const Visitor& f) const;

 private:
  RowJournal(std::string path, int fd, std::uint64_t length, Fnv1a64 digest)
      : path_(std::move(path)), fd_(fd), length_(length), digest_(digest) {}
  void put(char kind, const std::string& dataset, const void* values, std::uint64_t count);
  std::string path_;
  int fd_ = -1;
  std::uint64_t length_ = 0;  // bytes on disk
  Fnv1a64 digest_;            // of the bytes on disk and in the buffer
  std::string buffer_;
};

std::string journal_header(const std::string& run_id);

}  // namespace fp4d
