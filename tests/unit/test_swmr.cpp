// SWMR (single writer, multiple readers) as long runs' traces use it: h5::Format::Swmr,
// File::start_swmr_write, open_rw's handling of a killed writer's flags (src/trace/h5.hpp), and
// the trace's SWMR phase (SwmrPhase, src/trace/run_rows.hpp). The reader is a separate
// process, as in use: HDF5 does not open one file twice in one process with other flags. It
// reads through the raw HDF5 API, the way h5py does.
#include <hdf5.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/temp_dir.hpp"
#include "trace/h5.hpp"
#include "trace/row_journal.hpp"
#include "trace/run_rows.hpp"

namespace h5 = fp4d::h5;

namespace {

struct TempDir : fp4d_test::TempDir {
  TempDir() : fp4d_test::TempDir("fp4d_test_swmr") {}
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const h5::Error& e) {
    return e.what();
  }
  return "(no h5::Error thrown)";
}

// One byte from fd, or '?' after `seconds` without one (the other side died or hung: the test
// fails saying so instead of waiting forever).
char receive(int fd, int seconds) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, seconds * 1000) != 1) return '?';
  char c = '?';
  return ::read(fd, &c, 1) == 1 ? c : '?';
}

void send(int fd, char c) { REQUIRE(::write(fd, &c, 1) == 1); }

// Rows of the 1-D float64 dataset `name` as a SWMR reader sees them, refreshed first.
std::vector<double> swmr_rows(hid_t file, const char* name) {
  const hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  REQUIRE(d >= 0);
  REQUIRE(H5Drefresh(d) >= 0);
  const hid_t s = H5Dget_space(d);
  hsize_t n = 0;
  REQUIRE(H5Sget_simple_extent_dims(s, &n, nullptr) == 1);
  std::vector<double> v(n);
  if (n > 0) REQUIRE(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
  H5Sclose(s);
  H5Dclose(d);
  return v;
}

void append_rows(h5::Appendable<double>& a, int from, int to) {
  for (int i = from; i < to; ++i) {
    const double x = 0.5 * i;
    a.append(&x, 1);
  }
}

}  // namespace

TEST_CASE("swmr: the file format, and starting SWMR writing only where it can") {
  TempDir tmp;
  {
    h5::File f = h5::File::create(tmp.file("old.h5"));
    CHECK_FALSE(f.swmr_format());
    const std::string e = error_of([&] { f.start_swmr_write(); });
    CHECK(e.find("not in the HDF5 1.10 format") != std::string::npos);
    CHECK_FALSE(f.swmr_writing());
  }
  {
    h5::File f = h5::File::create(tmp.file("new.h5"), h5::Format::Swmr);
    CHECK(f.swmr_format());
    f.root().create_appendable<double>("x", {});
    f.root().set_attr("status", std::string("running"));
  }
  // Opened again read-write, it stays in the 1.10 format and can switch to SWMR writing.
  h5::File f = h5::File::open_rw(tmp.file("new.h5"));
  CHECK(f.swmr_format());
  auto x = f.root().open_appendable<double>("x");
  f.start_swmr_write();
  CHECK(f.swmr_writing());
  append_rows(x, 0, 3);
  f.close();
  // Closing left the mode: the file reads as any other, with what was written.
  h5::File r = h5::File::open_read(tmp.file("new.h5"));
  CHECK(r.root().read<double>("x") == std::vector<double>{0.0, 0.5, 1.0});
  CHECK(r.root().get_attr_string("status") == "running");
}

TEST_CASE("swmr: a reader in another process sees the rows grow; a killed writer's file is continued") {
  TempDir tmp;
  const std::string path = tmp.file("live.h5");
  {
    h5::File f = h5::File::create(path, h5::Format::Swmr);
    f.root().create_appendable<double>("g/loss", {}, 4);
  }
  int up[2], down[2];
  REQUIRE(::pipe(up) == 0);
  REQUIRE(::pipe(down) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the writer: 10 rows, then 15 more, each batch flushed; then killed
    char reply = 'E';
    try {
      h5::File f = h5::File::open_rw(path);
      auto loss = f.root().open_appendable<double>("g/loss");
      f.start_swmr_write();
      append_rows(loss, 0, 10);
      f.flush();
      reply = '1';
      if (::write(up[1], &reply, 1) != 1 || receive(down[0], 60) != 'g') ::_exit(3);
      append_rows(loss, 10, 25);
      f.flush();
      reply = '2';
      if (::write(up[1], &reply, 1) != 1) ::_exit(3);
      receive(down[0], 60);  // killed while waiting, the file open in SWMR mode
    } catch (...) {
      if (::write(up[1], &reply, 1) != 1) ::_exit(3);
    }
    ::_exit(4);
  }
  const auto reap = [&] {
    ::kill(pid, SIGKILL);
    int status = 0;
    return ::waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  };
  INFO("the writer did not report its first flush within 60 s ('?'), or failed ('E')");
  const char first = receive(up[0], 60);
  if (first != '1') reap();
  REQUIRE(first == '1');

  // A plain open is refused while the writer has the file; a SWMR reader opens it.
  const std::string plain = error_of([&] { h5::File::open_read(path); });
  CHECK(plain.find("already open for write") != std::string::npos);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  REQUIRE(H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) >= 0);
  const hid_t reader = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
  H5Pclose(fapl);
  CHECK(reader >= 0);
  std::vector<double> seen;
  if (reader >= 0) seen = swmr_rows(reader, "g/loss");
  std::vector<double> want;
  for (int i = 0; i < 10; ++i) want.push_back(0.5 * i);
  CHECK(seen == want);

  send(down[1], 'g');
  const char second = receive(up[0], 60);
  CHECK(second == '2');
  if (reader >= 0 && second == '2') {
    seen = swmr_rows(reader, "g/loss");  // the same reader, refreshed
    for (int i = 10; i < 25; ++i) want.push_back(0.5 * i);
    CHECK(seen == want);
  }
  if (reader >= 0) H5Fclose(reader);
  CHECK(reap());

  // Killed in SWMR mode: the superblock still says a writer has it. open_rw refuses it unless
  // told to clear that, and then the file holds every flushed row and can go on as before.
  const std::string refused = error_of([&] { h5::File::open_rw(path); });
  CHECK(refused.find("already open for write") != std::string::npos);
  {
    h5::File f = h5::File::open_rw(path, h5::StaleWriter::Clear);
    CHECK(f.root().read<double>("g/loss") == want);
    auto loss = f.root().open_appendable<double>("g/loss");
    f.start_swmr_write();
    append_rows(loss, 25, 26);
  }
  want.push_back(12.5);
  CHECK(h5::File::open_read(path).root().read<double>("g/loss") == want);
  ::close(up[0]), ::close(up[1]), ::close(down[0]), ::close(down[1]);
}

TEST_CASE("swmr: a trace's SWMR phase defers attribute changes to its end and keeps its rows") {
  TempDir tmp;
  const std::string path = tmp.file("trace.h5");
  h5::File f = h5::File::create(path, h5::Format::Swmr);
  fp4d::RunRows rows;
  const auto id = rows.doubles(f.root(), "g/x", {2}, fp4d::RunRows::Counts::Records, true);
  f.root().open_group("g").set_attr("path", std::string("before"));
  fp4d::RowJournal journal = fp4d::RowJournal::create(path + ".rows", "00000000deadbeef");

  fp4d::SwmrPhase phase;
  phase.start(f);
  REQUIRE(phase.active());
  CHECK(f.swmr_writing());
  phase.set_attrs(f, [](h5::Group root) { root.open_group("g").set_attr("path", std::string("after")); });
  CHECK(f.root().open_group("g").get_attr_string("path") == "before");  // not while readers may look
  rows.stage(id, std::vector<double>{1, 2});
  rows.commit(journal);
  CHECK(rows.doubles_at(id).rows() == 1);

  phase.end(f, rows);
  CHECK_FALSE(phase.active());
  CHECK_FALSE(f.swmr_writing());
  CHECK(f.root().open_group("g").get_attr_string("path") == "after");
  // The datasets were opened again: rows go on, and the digest runs on over both commits.
  rows.stage(id, std::vector<double>{3, 4});
  rows.commit(journal);
  CHECK(rows.doubles_at(id).read<double>() == std::vector<double>{1, 2, 3, 4});
  fp4d::Fnv1a64 d;
  d.add(std::vector<double>{1, 2, 3, 4});
  CHECK(rows.digests().at("/g/x") == d.value());
  phase.end(f, rows);  // outside the phase: nothing
  CHECK(f.is_open());

  // A trace in the earliest format (an older fp4drift's) has no SWMR phase: attributes at once.
  h5::File old = h5::File::create(tmp.file("old.h5"));
  old.root().create_group("g");
  fp4d::SwmrPhase none;
  none.start(old);
  CHECK_FALSE(none.active());
  none.set_attrs(old, [](h5::Group root) { root.open_group("g").set_attr("path", std::string("now")); });
  CHECK(old.root().open_group("g").get_attr_string("path") == "now");
}
