// trace/run_files.hpp: what a long run's files are allowed to look like once it is complete.
#include <filesystem>
#include <fstream>
#include <string>

#include "support/catch.hpp"
#include "support/temp_dir.hpp"
#include "trace/h5.hpp"
#include "trace/run_checkpoint.hpp"
#include "trace/run_files.hpp"

namespace fs = std::filesystem;
namespace h5 = fp4d::h5;

namespace {

void write_trace(const std::string& path, const std::string& status) {
  h5::File f = h5::File::create(path);
  f.root().set_attr("status", status);
}

void touch(const std::string& path) { std::ofstream(path) << "x"; }

}  // namespace

TEST_CASE("a complete run's leftover checkpoint and journal are removed; anything else is left alone") {
  const fp4d_test::TempDir t("fp4d_test_run_files");
  const std::string trace = t.file("run.h5");
  const std::string ckpt = fp4d::checkpoint_path(trace), rows = fp4d::journal_path(trace);

  SECTION("complete, with both beside it (killed between closing the trace and removing them)") {
    write_trace(trace, "complete");
    touch(ckpt);
    touch(rows);
    CHECK(fp4d::remove_leftovers_of_complete_run(trace));
    CHECK_FALSE(fs::exists(ckpt));
    CHECK_FALSE(fs::exists(rows));
    CHECK(fp4d::run_trace_is_complete(trace));  // the trace itself is kept
  }
  SECTION("complete, with only the journal left (killed between the two removals)") {
    write_trace(trace, "complete");
    touch(rows);
    CHECK(fp4d::remove_leftovers_of_complete_run(trace));
    CHECK_FALSE(fs::exists(rows));
  }
  SECTION("complete and clean: nothing to do") {
    write_trace(trace, "complete");
    CHECK_FALSE(fp4d::remove_leftovers_of_complete_run(trace));
    CHECK(fs::exists(trace));
  }
  SECTION("not complete: the checkpoint and journal are what a resume needs, and stay") {
    write_trace(trace, "running");
    touch(ckpt);
    touch(rows);
    CHECK_FALSE(fp4d::remove_leftovers_of_complete_run(trace));
    CHECK(fs::exists(ckpt));
    CHECK(fs::exists(rows));
  }
  SECTION("not a readable trace: left alone") {
    touch(trace);
    touch(ckpt);
    CHECK_FALSE(fp4d::remove_leftovers_of_complete_run(trace));
    CHECK(fs::exists(ckpt));
  }
}
