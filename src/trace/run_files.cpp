#include "trace/run_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

namespace fp4d {

void remove_run_files(const std::string& trace, std::initializer_list<const char*> suffixes) {
  std::error_code ec;
  for (const char* s : suffixes) std::filesystem::remove(trace + s, ec);
}

void require_output_directory(const std::string& trace) {
  const auto parent = std::filesystem::path(trace).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw std::invalid_argument("output directory '" + parent.string() + "' does not exist");
}

void replace_trace_file(const std::string& trace, const std::function<void(h5::File)>& fill) {
  require_output_directory(trace);
  const std::string partial = trace + ".partial";
  fill(h5::File::create(partial, h5::Format::Swmr));
  std::filesystem::rename(partial, trace);
  sync_directory_of(trace);
}

bool run_trace_is_complete(const std::string& path) {
  try {
    return h5::File::open_read(path).root().get_attr_string("status") == "complete";
  } catch (const h5::Error&) {
    return false;
  } catch (const h5::FileInUse&) {
    return false;  // a run still writing it; opening it to resume will say so
  }
}

h5::File open_run_trace(const std::string& path, const std::string& workload, const std::string& config_text) {
  {
    // A run killed while it was writing (in SWMR mode or not) leaves the trace flagged as open
    // for writing; the resume verifies every row of it against the checkpoint, so the flag is
    // cleared rather than taken for a torn file (which would rebuild it from the journal).
    h5::File f = h5::File::open_rw(path, h5::StaleWriter::Clear);
    const h5::Group root = f.root();
    // A kill while the writer changed metadata (attributes, the final states' group) can leave a
    // header that no longer decodes while every row reads back: an h5::Error here makes the
    // resume rebuild the trace from its journal rather than fail later, half-way.
    root.check_readable();
    if (root.get_attr_string("schema") != "fp4drift.run" || root.get_attr_string("workload") != workload)
      throw std::invalid_argument("--resume: " + path + " is not an fp4drift " + workload + " run trace");
    if (root.get_attr_string("config") != config_text)
      throw std::invalid_argument("--resume: the config differs from the one " + path +
                                  " was started with (resuming would not continue the same run)");
    if (root.get_attr_string("status") != "complete") {
      if (!root.has_attr("run_id"))
        throw std::invalid_argument("--resume: " + path + " has no run id (it was written by an fp4drift whose "
                                    "checkpoints could not be verified): start it again");
      return f;
    }
  }  // complete (its stale writer flag, if the kill left one, cleared by this close)
  throw_complete(path);
}

[[noreturn]] void throw_complete(const std::string& path) {
  const bool removed = remove_leftovers_of_complete_run(path);
  throw std::invalid_argument("--resume: " + path + " is complete" +
                              (removed ? " (a kill after its end had left its .ckpt and .rows beside it: removed)" : ""));
}

void sync_directory_of(const std::string& path) {
  const auto dir = std::filesystem::path(path).parent_path();
  h5::File::sync_directory(dir.empty() ? "." : dir.string());
}

std::string new_run_id() {
  std::random_device rd;
  const std::uint64_t id = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

void create_run_files(const std::string& trace, const std::string& config_text,
                      const std::function<void(const std::string&, const std::string&)>& create_trace,
                      const std::function<void(const CheckpointMark&)>& write_checkpoint) {
  CheckpointMark m;
  m.run_id = new_run_id();
  m.config_digest = text_digest(config_text);
  const std::string partial = trace + ".partial";
  try {
    create_trace(partial, m.run_id);
    const RowJournal j = RowJournal::create(journal_path(trace), m.run_id);
    m.journal_length = j.length();
    m.journal_digest = j.digest();
    write_checkpoint(m);
    std::filesystem::rename(partial, trace);
    sync_directory_of(trace);
  } catch (...) {
    remove_run_files(trace, {".partial", ".ckpt", ".rows"});
    throw;
  }
}

void remove_resume_files(const std::string& trace) {
  // The trace was synced before it was closed, and its close still wrote: HDF5 cuts the file to
  // its allocated end and clears the superblock's "open for writing" flags. Those writes reach
  // the disk before the files that could rebuild the trace go; otherwise a power loss could
  // leave a trace whose status says complete but that HDF5 refuses ("truncated file", or "already
  // open for write"), with no checkpoint or journal left to rebuild it from.
  const int fd = ::open(trace.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot sync '" + trace + "': " + std::strerror(errno));
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error("cannot sync '" + trace + "': " + std::strerror(err));
  std::filesystem::remove(checkpoint_path(trace));
  std::filesystem::remove(journal_path(trace));
  sync_directory_of(trace);
}

bool remove_leftovers_of_complete_run(const std::string& trace) {
  if (!run_trace_is_complete(trace)) return false;
  if (!std::filesystem::exists(checkpoint_path(trace)) && !std::filesystem::exists(journal_path(trace))) return false;
  remove_resume_files(trace);
  return true;
}

RowJournal reopen_journal(const std::string& trace, const CheckpointMark& mark) {
  try {
    return RowJournal::reopen(journal_path(trace), mark.run_id, mark.journal_length, mark.journal_digest);
  } catch (const h5::DiskFull&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw ResumeRefused(e.what());
  }
}

void rethrow_resume_refused(const std::string& path, const ResumeRefused& e) {
  throw ResumeRefused("--resume: " + path + " cannot be continued: " + e.what() + "; it is left as it was (remove " + path +
                      " and its .ckpt and .rows files to start the run again)");
}

}  // namespace fp4d
