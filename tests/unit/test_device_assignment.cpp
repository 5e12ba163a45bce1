// Which GPU each run of a sweep gets (sweep/device_assignment.hpp), with fake device lists: the
// CUDA_VISIBLE_DEVICES values CUDA would read otherwise than written are refused, a fake /dev
// is enumerated, slots and node-local ranks map round robin, sharing is counted and said; the
// Executor puts the chosen value into a real child's environment and its record and the index
// keep it. And the device a run records in its trace (trace/device_identity.hpp): NVIDIA's UUID
// text, the CPU backend's identity, the attributes of a fresh and of a resumed mlp and lm run.
#include <hdf5.h>
#include <sys/stat.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "sim/lm_run.hpp"
#include "sim/lp_trainer.hpp"
#include "sim/mlp_run.hpp"
#include "support/catch.hpp"
#include "support/config_error.hpp"
#include "support/temp_dir.hpp"
#include "sweep/device_assignment.hpp"
#include "sweep/expand.hpp"
#include "sweep/index.hpp"
#include "sweep/runner.hpp"
#include "sweep/state.hpp"
#include "trace/device_identity.hpp"
#include "trace/h5.hpp"
#include "util/config.hpp"

namespace sw = fp4d::sweep;
using fp4d_test::contains;
using fp4d_test::TempDir;
using Strings = std::vector<std::string>;

namespace {

// The message of the std::invalid_argument parsing `value` throws ("" if none).
std::string refusal_of(const std::string& value) {
  try {
    sw::parse_cuda_visible_devices(value);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void touch(const std::filesystem::path& p) { std::ofstream(p) << ""; }

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Sets (or, with nullopt, unsets) an environment variable for the scope, then restores it.
struct EnvGuard {
  std::string name;
  std::optional<std::string> old;
  EnvGuard(std::string n, const std::optional<std::string>& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ~EnvGuard() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
};

// A variable-length string dataset (the index's text columns), through the HDF5 C API: the
// project's h5 layer writes them (trace/sweep_index.cpp) but has no reader for them.
Strings read_strings(const std::string& file, const std::string& path) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  REQUIRE(d >= 0);
  const hid_t space = H5Dget_space(d);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  std::vector<char*> raw(n, nullptr);
  REQUIRE(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) >= 0);
  Strings out;
  for (char* s : raw) out.emplace_back(s ? s : "");
#if H5_VERSION_GE(1, 12, 0)
  H5Treclaim(type, space, H5P_DEFAULT, raw.data());
#else
  H5Dvlen_reclaim(type, space, H5P_DEFAULT, raw.data());
#endif
  H5Tclose(type);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return out;
}

const char* kSumBase = R"(workload = "sum"
[sum]
terms = "constant"
c = 1.0
n = 16
format = "fp16"
rounding = "rne"
runs = 1
seed = 1
)";

sw::Sweep sum_sweep(int runs) {
  std::string seeds;
  for (int i = 0; i < runs; ++i) seeds += (i ? ", " : "") + std::to_string(i + 1);
  return sw::expand_sweep("base = \"b\"\n[grid.sum]\nseed = [" + seeds + "]\n", "s.toml", kSumBase, "base.toml");
}

// A stand-in for a CUDA device (the trainers stay the CPU's: the trace does not know).
fp4d::DeviceIdentity fake_gpu(const std::string& uuid, std::int64_t ordinal, const std::optional<std::string>& cvd) {
  fp4d::DeviceIdentity d;
  d.device = "NVIDIA H200";
  d.uuid = uuid;
  d.ordinal = ordinal;
  d.pci_bus_id = "0000:19:00.0";
  d.cuda_visible_devices = cvd;
  return d;
}

}  // namespace

// ---- CUDA_VISIBLE_DEVICES ----------------------------------------------------------------

TEST_CASE("devices: CUDA_VISIBLE_DEVICES lists with gaps, spaces, UUIDs and MIG identifiers", "[devices]") {
  CHECK(sw::parse_cuda_visible_devices("0") == Strings{"0"});
  CHECK(sw::parse_cuda_visible_devices("0,2,5") == Strings{"0", "2", "5"});  // gaps are the list's business
  CHECK(sw::parse_cuda_visible_devices("5,0,2") == Strings{"5", "0", "2"});  // order kept: CUDA numbers in list order
  CHECK(sw::parse_cuda_visible_devices(" 0 , 1\t,\t3 ") == Strings{"0", "1", "3"});
  CHECK(sw::parse_cuda_visible_devices("0,1,") == Strings{"0", "1"});   // a trailing comma: CUDA read both already
  CHECK(sw::parse_cuda_visible_devices("0,1, ") == Strings{"0", "1"});
  CHECK(sw::parse_cuda_visible_devices("007,10") == Strings{"7", "10"});  // as CUDA reads a number
  const std::string u1 = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", u2 = "GPU-1b2C3d4e";  // full, abbreviated
  CHECK(sw::parse_cuda_visible_devices(u1 + ", " + u2) == Strings{u1, u2});  // verbatim, case kept
  const std::string m1 = "MIG-7d4e2f4a-0b1c-5d6e-8f90-a1b2c3d4e5f6";
  const std::string m2 = "MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0";  // pre-R470 form
  CHECK(sw::parse_cuda_visible_devices(m1 + "," + m2) == Strings{m1, m2});
}

TEST_CASE("devices: a CUDA_VISIBLE_DEVICES value CUDA would read otherwise than written is refused", "[devices]") {
  struct Case {
    const char* value;
    const char* says;
  };
  for (const Case& c : {Case{"", "set but empty, which shows CUDA no device"},
                        Case{"  ", "set but empty"},
                        Case{"0,,1", "entry 2 is empty; CUDA stops at it"},
                        Case{",0", "entry 1 is empty"},
                        Case{"0,-1,1", "entry 2 '-1' is neither a device index nor a GPU-/MIG- UUID"},
                        Case{"1gpu", "entry 1 '1gpu' is neither"},
                        Case{"0,+1", "entry 2 '+1' is neither"},
                        Case{"GPU-", "entry 1 'GPU-' is neither"},
                        Case{"GPU-8932g937", "is neither"},  // not hex
                        Case{"NoDevFiles", "is neither"},
                        Case{"0,0", "entry 2 '0' repeats a device; CUDA shows no device at all"},
                        Case{"1,01", "entry 2 '01' repeats a device"},
                        Case{"GPU-ab12,GPU-AB12", "entry 2 'GPU-AB12' repeats a device"},
                        Case{"0,GPU-ab12", "entry 2 'GPU-ab12' is a GPU- UUID in a list of device indices"},
                        Case{"GPU-ab12,1", "entry 2 '1' is a device index in a list of GPU- UUIDs"},
                        Case{"MIG-ab12,GPU-cd34", "is a GPU- UUID in a list of MIG- UUIDs"}}) {
    const std::string e = refusal_of(c.value);
    INFO("CUDA_VISIBLE_DEVICES='" << c.value << "': " << e);
    CHECK(contains(e, std::string("CUDA_VISIBLE_DEVICES='") + c.value + "': "));
    CHECK(contains(e, c.says));
    CHECK(e.find('\n') == std::string::npos);  // one line
  }
}

TEST_CASE("devices: the /dev fallback counts nvidiaN nodes of a fake directory, nothing else", "[devices]") {
  TempDir d("fp4d_test_fake_dev");
  for (const char* f : {"nvidia0", "nvidia1", "nvidia3", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset",
                        "nvidia0x", "nvidia", "null", "dxg"})
    touch(d.path / f);
  std::filesystem::create_directories(d.path / "nvidia-caps");
  // Three devices whatever their minor numbers: CUDA numbers them 0, 1, 2.
  CHECK(sw::enumerate_nvidia_devices(d.path.string()) == Strings{"0", "1", "2"});
  CHECK(sw::visible_devices(nullptr, d.path.string()) == Strings{"0", "1", "2"});
  // A set CUDA_VISIBLE_DEVICES wins over /dev (a scheduler's allocation is never escaped).
  CHECK(sw::visible_devices("2", d.path.string()) == Strings{"2"});
  CHECK(sw::visible_devices("GPU-ab12", d.path.string()) == Strings{"GPU-ab12"});
  // Set but empty hides every device; it is not "unset".
  CHECK_THROWS_AS(sw::visible_devices("", d.path.string()), std::invalid_argument);

  TempDir empty("fp4d_test_empty_dev");
  touch(empty.path / "nvidiactl");
  CHECK(sw::enumerate_nvidia_devices(empty.path.string()).empty());
  CHECK(sw::enumerate_nvidia_devices((d.path / "does-not-exist").string()).empty());
}

// ---- slots, ranks, sharing ---------------------------------------------------------------

TEST_CASE("devices: one GPU per slot while there are enough, round robin beyond", "[devices]") {
  // Today's single GPU: every slot of every rank gets it.
  for (int rank = 0; rank < 3; ++rank)
    for (int slot = 0; slot < 4; ++slot) CHECK(sw::device_for_slot({"0"}, rank, 4, slot) == "0");
  // More concurrent runs than GPUs on one rank.
  const Strings two{"0", "1"};
  CHECK(sw::device_for_slot(two, 0, 3, 0) == "0");
  CHECK(sw::device_for_slot(two, 0, 3, 1) == "1");
  CHECK(sw::device_for_slot(two, 0, 3, 2) == "0");
  // More node-local ranks than GPUs (workers = 1): ranks alternate.
  Strings by_rank;
  for (int rank = 0; rank < 4; ++rank) by_rank.push_back(sw::device_for_slot(two, rank, 1, 0));
  CHECK(by_rank == Strings{"0", "1", "0", "1"});
  // A list with gaps, two ranks of two slots: the node's slots 0..3 take 0, 2, 5, 0.
  const Strings gaps = sw::parse_cuda_visible_devices("0,2,5");
  CHECK(sw::device_for_slot(gaps, 0, 2, 0) == "0");
  CHECK(sw::device_for_slot(gaps, 0, 2, 1) == "2");
  CHECK(sw::device_for_slot(gaps, 1, 2, 0) == "5");
  CHECK(sw::device_for_slot(gaps, 1, 2, 1) == "0");
  // UUIDs are handed out verbatim.
  const Strings migs{"MIG-aa11", "MIG-bb22"};
  CHECK(sw::device_for_slot(migs, 1, 1, 0) == "MIG-bb22");
  // No list (CPU backend): the variable is left alone.
  CHECK(sw::device_for_slot({}, 2, 3, 1).empty());
  CHECK_THROWS_AS(sw::device_for_slot(two, 0, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(sw::device_for_slot(two, 0, 0, 0), std::invalid_argument);
  CHECK_THROWS_AS(sw::device_for_slot(two, -1, 2, 0), std::invalid_argument);
  CHECK_THROWS_AS(sw::device_for_slot(two, 0, 2, -1), std::invalid_argument);
}

TEST_CASE("devices: how many runs each GPU carries is what device_for_slot hands out", "[devices]") {
  // Every (devices, ranks, slots) of a small node: count device_for_slot's choices and compare
  // with runs_per_device, which the warning reports.
  for (int g = 1; g <= 5; ++g) {
    Strings devices;
    for (int k = 0; k < g; ++k) devices.push_back(std::to_string(10 + k));
    for (int ranks = 1; ranks <= 4; ++ranks)
      for (int slots = 1; slots <= 4; ++slots) {
        std::map<std::string, int> count;
        for (int r = 0; r < ranks; ++r)
          for (int k = 0; k < slots; ++k) ++count[sw::device_for_slot(devices, r, slots, k)];
        const std::vector<int> n = sw::runs_per_device(devices.size(), ranks * slots);
        INFO(g << " GPUs, " << ranks << " ranks x " << slots << " slots");
        for (int k = 0; k < g; ++k) CHECK(count[devices[static_cast<std::size_t>(k)]] == n[static_cast<std::size_t>(k)]);
        // Balanced: no GPU carries two runs more than another.
        CHECK(n.front() - n.back() <= 1);
        // Each run has a GPU of its own exactly when there are enough.
        const bool own = ranks * slots <= g;
        bool all_le_one = true;
        for (const auto& [dev, c] : count) all_le_one = all_le_one && c <= 1;
        CHECK(all_le_one == own);
      }
  }
  CHECK(sw::runs_per_device(2, 3) == std::vector<int>{2, 1});
  CHECK(sw::runs_per_device(3, 1) == std::vector<int>{1, 0, 0});
  CHECK(sw::runs_per_device(0, 3).empty());
}

TEST_CASE("devices: the sharing warning says how many runs each GPU carries, and only when they share", "[devices]") {
  CHECK(sw::sharing_warning({"0"}, 1).empty());
  CHECK(sw::sharing_warning({"0", "1"}, 2).empty());
  CHECK(sw::sharing_warning({}, 8).empty());  // no list: nothing is pinned (run_local says so itself)
  CHECK(sw::sharing_warning({"0", "1"}, 4) ==
        "fp4drift sweep: warning: 4 concurrent runs on 2 GPUs: runs share a GPU, round robin (2 on each); they "
        "contend for its memory and compute");
  CHECK(sw::sharing_warning({"0", "2", "5"}, 4, " on node n17") ==
        "fp4drift sweep: warning: 4 concurrent runs on node n17 on 3 GPUs: runs share a GPU, round robin (runs per "
        "GPU: 0 2, 2 1, 5 1); they contend for its memory and compute");
  CHECK(contains(sw::sharing_warning({"GPU-ab12"}, 3), "3 concurrent runs on 1 GPU: runs share a GPU, round robin (3 on each)"));
}

// ---- the Executor gives each child its device ------------------------------------------

TEST_CASE("devices: the Executor puts each slot's device into its child's environment and record", "[devices]") {
  TempDir d("fp4d_test_exec_devices");
  // The child: prints what it was given and fails as a run would, with an error line.
  const std::string script = d.file("child.sh");
  std::ofstream(script) << "#!/bin/sh\n"
                           "echo \"child CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} args $1 $5 $6\"\n"
                           "echo 'fp4drift: error: stub run'\n"
                           "exit 3\n";
  ::chmod(script.c_str(), 0755);
  const sw::Sweep s = sum_sweep(3);
  const std::string out = (d.path / "out").string();
  for (const sw::SweepRun& r : s.runs) std::filesystem::create_directories(sw::RunPaths(out, r.id).dir);
  // What the sweep inherited must be replaced, never passed on beside the chosen device.
  const EnvGuard inherited("CUDA_VISIBLE_DEVICES", std::string("0,2,5"));

  const auto run_all = [&](const Strings& devices, int local_rank) {
    sw::ExecOptions o;
    o.outdir = out;
    o.backend = "cuda";
    o.slots = 3;
    o.local_rank = local_rank;
    o.devices = devices;
    o.program = script;
    sw::Executor ex(s, o);
    for (int run = 0; run < 3; ++run) ex.launch(run);  // run k in slot k
    std::map<int, sw::RunRecord> done;
    const auto t0 = std::chrono::steady_clock::now();
    while (done.size() < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
      for (auto& [run, rec] : ex.poll()) done[run] = rec;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    REQUIRE(done.size() == 3);
    return done;
  };

  // Local rank 1 of a node with workers = 3 and the list 0,2,5,7: its slots are the node's
  // 3, 4, 5, which take entries 3, 0, 1 - devices 7, 0, 2.
  const std::map<int, sw::RunRecord> a = run_all(sw::parse_cuda_visible_devices("0,2,5,7"), 1);
  const Strings want{"7", "0", "2"};
  for (int run = 0; run < 3; ++run) {
    const sw::RunPaths p(out, s.runs[static_cast<std::size_t>(run)].id);
    const std::string log = read_text(p.log);
    INFO(log);
    CHECK(contains(log, "child CUDA_VISIBLE_DEVICES=" + want[static_cast<std::size_t>(run)] + " args run --backend cuda\n"));
    const sw::RunRecord& rec = a.at(run);
    CHECK(rec.cuda_visible_devices == want[static_cast<std::size_t>(run)]);
    CHECK(rec.status == "failed");
    CHECK(rec.error == "fp4drift: error: stub run");
    CHECK(sw::read_record(p.record).cuda_visible_devices == want[static_cast<std::size_t>(run)]);  // on disk too
  }

  // Two GPUs for three slots on local rank 0: the third run shares the first GPU.
  const std::map<int, sw::RunRecord> b = run_all({"GPU-aa11", "GPU-bb22"}, 0);
  CHECK(b.at(0).cuda_visible_devices == "GPU-aa11");
  CHECK(b.at(1).cuda_visible_devices == "GPU-bb22");
  CHECK(b.at(2).cuda_visible_devices == "GPU-aa11");
  CHECK(contains(read_text(sw::RunPaths(out, s.runs[2].id).log), "child CUDA_VISIBLE_DEVICES=GPU-aa11 args"));

  // No list (the CPU backend's): the child inherits the variable as it is, and the record says
  // the sweep set nothing.
  const std::map<int, sw::RunRecord> c = run_all({}, 0);
  for (int run = 0; run < 3; ++run) CHECK(c.at(run).cuda_visible_devices.empty());
  const std::string log = read_text(sw::RunPaths(out, s.runs[0].id).log);
  CHECK(log.substr(log.rfind("child ")).rfind("child CUDA_VISIBLE_DEVICES=0,2,5 args", 0) == 0);

  // The index carries every run's device.
  std::vector<sw::RunRecord> records;
  for (int run = 0; run < 3; ++run) records.push_back(b.at(run));
  sw::write_index(out, s, records, std::vector<sw::RunMetrics>(3), sw::IndexInfo{"complete", "local", 1, "test"});
  CHECK(read_strings(out + "/sweep.h5", "/summary/cuda_visible_devices") == Strings{"GPU-aa11", "GPU-bb22", "GPU-aa11"});
}

TEST_CASE("devices: a device named by a MIG identifier has a MIG- UUID, any other a GPU- one", "[devices]") {
  CHECK(sw::device_uuid_prefix(nullptr, 0) == "GPU-");
  CHECK(sw::device_uuid_prefix("0,1", 1) == "GPU-");
  CHECK(sw::device_uuid_prefix("MIG-aa11,MIG-bb22", 1) == "MIG-");
  CHECK(sw::device_uuid_prefix("MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0", 0) == "MIG-");
  CHECK(sw::device_uuid_prefix("GPU-aa11", 0) == "GPU-");
  CHECK(sw::device_uuid_prefix("MIG-aa11", 1) == "GPU-");     // no such ordinal
  CHECK(sw::device_uuid_prefix("MIG-aa11,,x", 0) == "GPU-");  // a list CUDA reads otherwise says nothing
}

TEST_CASE("devices: a record keeps its device through text, and older records read as none", "[devices]") {
  sw::RunRecord r;
  r.status = "complete";
  r.cuda_visible_devices = "MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0";
  CHECK(sw::parse_record(sw::record_text(r), "rec").cuda_visible_devices == r.cuda_visible_devices);
  const std::string older = "status = \"complete\"\nexit_code = 0\nwall_s = 1.5\nattempts = 1\nerror = \"\"\nrank = 0\n";
  CHECK(sw::parse_record(older, "old").cuda_visible_devices.empty());
}

// ---- the device a trace records ----------------------------------------------------------

TEST_CASE("device identity: NVIDIA's UUID text of 16 bytes", "[devices]") {
  // The UUID of the CUDA Programming Guide's CUDA_VISIBLE_DEVICES example, byte by byte.
  const std::array<unsigned char, 16> b{0x89, 0x32, 0xf9, 0x37, 0xd7, 0x2c, 0x41, 0x06,
                                        0xc1, 0x2f, 0x20, 0xbd, 0x9f, 0xae, 0xd9, 0xf6};
  CHECK(fp4d::format_device_uuid(b) == "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6");
  CHECK(fp4d::format_device_uuid(b, "MIG-") == "MIG-8932f937-d72c-4106-c12f-20bd9faed9f6");
  std::array<unsigned char, 16> z{}, f{};
  f.fill(0xff);
  CHECK(fp4d::format_device_uuid(z) == "GPU-00000000-0000-0000-0000-000000000000");
  CHECK(fp4d::format_device_uuid(f) == "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff");
}

TEST_CASE("device identity: the CPU backend is the CPU, with no CUDA attributes", "[devices]") {
  const fp4d::DeviceIdentity d = fp4d::cpu_backend().device_identity();
  CHECK(d.device == "cpu");
  CHECK(d.is_cpu());
  CHECK(d.uuid.empty());
  CHECK(d.ordinal == -1);
  CHECK(d.pci_bus_id.empty());
  CHECK_FALSE(d.cuda_visible_devices.has_value());

  TempDir t("fp4d_test_device_attrs");
  fp4d::h5::File f = fp4d::h5::File::create(t.file("a.h5"));
  fp4d::h5::Group root = f.root();
  fp4d::write_device_attributes(root, d);
  CHECK(root.get_attr_string("device") == "cpu");
  CHECK(root.get_attr_string("devices_used") == "cpu");
  for (const char* a : {"device_uuid", "device_ordinal", "device_pci_bus_id", "cuda_visible_devices"}) CHECK_FALSE(root.has_attr(a));
  // A GPU attempt after it, then the CPU again: the CUDA attributes come and go with the
  // device, the list of devices used only grows.
  const std::string u = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  fp4d::write_device_attributes(root, fake_gpu(u, 0, std::string("5")));
  CHECK(root.get_attr_string("device") == "NVIDIA H200");
  CHECK(root.get_attr_string("device_uuid") == u);
  CHECK(root.get_attr_int64("device_ordinal") == 0);
  CHECK(root.get_attr_string("device_pci_bus_id") == "0000:19:00.0");
  CHECK(root.get_attr_string("cuda_visible_devices") == "5");
  fp4d::write_device_attributes(root, fake_gpu(u, 1, std::nullopt));
  CHECK_FALSE(root.has_attr("cuda_visible_devices"));  // unset in that attempt
  CHECK(root.get_attr_int64("device_ordinal") == 1);
  fp4d::write_device_attributes(root, d);
  CHECK(root.get_attr_string("device") == "cpu");
  CHECK_FALSE(root.has_attr("device_uuid"));
  CHECK(root.get_attr_string("devices_used") == "cpu," + u);
}

TEST_CASE("device identity: an mlp trace records its device, and a resume on another GPU adds it", "[devices]") {
  TempDir t("fp4d_test_mlp_device");
  const std::string path = t.file("run.h5");
  fp4d::MlpRunSpec spec;
  spec.model.widths = {16, 32, 8};
  spec.model.batch = 16;
  spec.steps = 6;
  spec.queue = 1;  // records reach the trace (and progress) a step behind, not at the end
  spec.recipes = {"fp32"};
  const std::string ua = "GPU-00000000-0000-0000-0000-0000000000aa", ub = "GPU-00000000-0000-0000-0000-0000000000bb";
  std::atomic<bool> stop{false};
  fp4d::MlpRunControl ctl;
  ctl.path = path;
  ctl.backend = "cuda";
  ctl.device = fake_gpu(ua, 0, std::string("3"));
  ctl.stop = &stop;
  ctl.progress = [&](std::int64_t done, std::int64_t) {
    if (done == 3) stop = true;
  };
  REQUIRE(fp4d::run_mlp(spec, ctl) == fp4d::MlpRunOutcome::Interrupted);
  {
    const fp4d::h5::File f = fp4d::h5::File::open_read(path);
    const fp4d::h5::Group r = f.root();
    CHECK(r.get_attr_string("device") == "NVIDIA H200");
    CHECK(r.get_attr_string("device_uuid") == ua);
    CHECK(r.get_attr_string("cuda_visible_devices") == "3");
    CHECK(r.get_attr_string("devices_used") == ua);
  }
  ctl.resume = true;
  ctl.stop = nullptr;
  ctl.progress = nullptr;
  ctl.device = fake_gpu(ub, 0, std::string("GPU-00000000"));
  REQUIRE(fp4d::run_mlp(spec, ctl) == fp4d::MlpRunOutcome::Complete);
  const fp4d::h5::File f = fp4d::h5::File::open_read(path);
  const fp4d::h5::Group r = f.root();
  CHECK(r.get_attr_string("status") == "complete");
  CHECK(r.has_attr("resumed_at_step"));
  CHECK(r.get_attr_string("device_uuid") == ub);  // the last attempt's
  CHECK(r.get_attr_string("cuda_visible_devices") == "GPU-00000000");
  CHECK(r.get_attr_string("devices_used") == ua + "," + ub);

  // A CPU run: device "cpu" and nothing of CUDA's.
  fp4d::MlpRunControl cpu;
  cpu.path = t.file("cpu.h5");
  REQUIRE(fp4d::run_mlp(spec, cpu) == fp4d::MlpRunOutcome::Complete);
  const fp4d::h5::File g = fp4d::h5::File::open_read(cpu.path);
  CHECK(g.root().get_attr_string("device") == "cpu");
  CHECK(g.root().get_attr_string("devices_used") == "cpu");
  CHECK_FALSE(g.root().has_attr("device_uuid"));
}

TEST_CASE("device identity: an lm trace records its device, and a resume on another GPU adds it", "[devices]") {
  TempDir t("fp4d_test_lm_device");
  const std::string text =
      "workload = \"lm\"\n"
      "[lm]\nsteps = 6\nvocab = 16\nd_model = 32\nheads = 2\nkv_heads = 1\nffn = 32\nseq_len = 16\nbatch = 2\n"
      "pattern = \"AF\"\n[lm.optimizer]\nlr = 0.01\n[data]\norder = 1\nzipf_support = 4\n"
      "[recipes]\nnames = [\"fp32\"]\n[reference]\ncompare_every = 2\n";
  fp4d::Config cfg = fp4d::Config::parse(text, "lm.toml");
  REQUIRE(cfg.get_string("workload") == "lm");
  const fp4d::LmRunSpec spec = fp4d::parse_lm_run(cfg);
  cfg.finish();
  const std::string ua = "GPU-00000000-0000-0000-0000-0000000000aa", ub = "MIG-00000000-0000-0000-0000-0000000000bb";
  std::atomic<bool> stop{false};
  fp4d::LmRunControl ctl;
  ctl.path = t.file("lm.h5");
  ctl.config_text = text;
  ctl.backend = "cuda";
  ctl.device = fake_gpu(ua, 1, std::string("4,6"));
  ctl.stop = &stop;
  ctl.progress = [&](std::int64_t done, std::int64_t) {
    if (done == 3) stop = true;
  };
  REQUIRE(fp4d::run_lm(spec, ctl) == fp4d::LmRunOutcome::Interrupted);
  {
    const fp4d::h5::File f = fp4d::h5::File::open_read(ctl.path);
    CHECK(f.root().get_attr_string("device_uuid") == ua);
    CHECK(f.root().get_attr_int64("device_ordinal") == 1);
    CHECK(f.root().get_attr_string("cuda_visible_devices") == "4,6");
  }
  ctl.resume = true;
  ctl.stop = nullptr;
  ctl.progress = nullptr;
  ctl.device = fake_gpu(ub, 0, std::nullopt);
  REQUIRE(fp4d::run_lm(spec, ctl) == fp4d::LmRunOutcome::Complete);
  const fp4d::h5::File f = fp4d::h5::File::open_read(ctl.path);
  const fp4d::h5::Group r = f.root();
  CHECK(r.get_attr_string("device_uuid") == ub);
  CHECK(r.get_attr_int64("device_ordinal") == 0);
  CHECK_FALSE(r.has_attr("cuda_visible_devices"));
  CHECK(r.get_attr_string("devices_used") == ua + "," + ub);
}
