// The fp4drift CLI as a user meets it: exit codes, one-line errors, and never a partial
// output file that looks complete.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <hdf5.h>
#include <nlohmann/json.hpp>

#include "support/catch.hpp"
#include "support/trace_datasets.hpp"
#include "trace/h5.hpp"

namespace fs = std::filesystem;

namespace {

struct Result {
  int status;
  std::string out, err;
};

Result run(const std::string& args, const std::string& cwd = "") {
  // Per-process capture files: two test_cli processes at once (two build trees on one machine)
  // must not read each other's output - they did, as a rare "stderr not empty" failure.
  const fs::path dir = fs::temp_directory_path();
  const std::string tag = "fp4d_cli_" + std::to_string(::getpid());
  const std::string out = (dir / (tag + "_stdout.txt")).string(), err = (dir / (tag + "_stderr.txt")).string();
  const std::string cmd = (cwd.empty() ? std::string() : "cd '" + cwd + "' && ") + std::string(FP4DRIFT_EXE) + " " + args +
                          " >" + out + " 2>" + err;
  const int raw = std::system(cmd.c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("fp4d_cli_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_tensor(const std::string& path, const std::vector<float>& v, const fp4d::h5::Dims& dims) {
  fp4d::h5::File f = fp4d::h5::File::create(path);
  f.root().write("x", v, dims);
}

void require_no_output(const std::string& out) {
  CHECK_FALSE(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".partial"));
  CHECK_FALSE(fs::exists(out + ".ckpt"));  // a long run's checkpoint and journal
  CHECK_FALSE(fs::exists(out + ".rows"));
}

}  // namespace

TEST_CASE("quantize of a synthetic tensor succeeds and writes a complete file") {
  TempDir t;
  const std::string out = t.file("q.h5");
  const Result r = run("quantize --generate normal --shape 64x64 --recipe nvfp4,mxfp4 --out " + out);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("nvfp4") != std::string::npos);
  REQUIRE(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".partial"));
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  CHECK(f.root().get_attr_string("status") == "complete");
  CHECK(f.root().get_attr_string("schema") == "fp4drift.quantize");
  CHECK(f.root().is_dataset("recipes/nvfp4/codes"));
  CHECK(f.root().is_dataset("recipes/mxfp4/scales"));
}

TEST_CASE("--json prints one parseable object with the statistics") {
  const Result r = run("quantize --generate normal --shape 32x32 --recipe nvfp4 --json");
  REQUIRE(r.status == 0);
  CHECK(r.out.front() == '{');
  CHECK(r.out.find("\"nmse\":") != std::string::npos);
  CHECK(lines(r.out) == 1);
}

TEST_CASE("quantize: --preset names the presets, and --recipe and -r are the same option") {
  // --recipe stays an alias for the command lines recorded in traces and in scripts: each name
  // must run the same presets into the same trace.
  TempDir t;
  const std::string gen = "quantize --generate normal --shape 32x32 ";
  std::vector<nlohmann::ordered_json> stats;
  for (const std::string name : {"--preset", "--recipe", "-r"}) {
    INFO(name);
    const std::string out = t.file(std::to_string(stats.size()) + ".h5");
    const Result r = run(gen + name + " nvfp4,mxfp4 --json --out " + out);
    INFO(r.err);
    REQUIRE(r.status == 0);
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(r.out);
    REQUIRE(j["recipes"].size() == 2);
    CHECK(j["recipes"][0]["name"] == "nvfp4");
    CHECK(j["recipes"][1]["name"] == "mxfp4");
    stats.push_back(j["recipes"]);
    fp4d::h5::File f = fp4d::h5::File::open_read(out);
    CHECK(f.root().get_attr_string("status") == "complete");
    CHECK(f.root().open_group("recipes").get_attr_string("order") == "nvfp4,mxfp4");
    // Either name is one option: it excludes the custom options alike.
    const Result both = run(gen + name + " nvfp4 --format mxfp4");
    CHECK(both.status == 2);
    CHECK(both.err.find("--preset and the custom options") != std::string::npos);
  }
  CHECK(stats[1] == stats[0]);
  CHECK(stats[2] == stats[0]);
  CHECK(run("quantize --help").out.find("--preset,--recipe") != std::string::npos);
}

TEST_CASE("bad input: one-line error, exit status 2, no output file") {
  TempDir t;
  const std::string out = t.file("q.h5");
  SECTION("missing input file") {
    const Result r = run("quantize --input " + t.file("nope.h5") + ":/x --out " + out);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("nope.h5") != std::string::npos);
    require_no_output(out);
  }
  SECTION("missing dataset") {
    write_tensor(t.file("in.h5"), std::vector<float>(32, 1.0f), {32});
    const Result r = run("quantize --input " + t.file("in.h5") + ":/y --out " + out);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("/y") != std::string::npos);
    require_no_output(out);
  }
  SECTION("wrong rank") {
    write_tensor(t.file("in.h5"), std::vector<float>(2 * 3 * 16, 1.0f), {2, 3, 16});
    const Result r = run("quantize --input " + t.file("in.h5") + ":/x --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("rank 3") != std::string::npos);
    require_no_output(out);
  }
  SECTION("NaN in the input is refused unless allowed") {
    std::vector<float> v(64, 1.0f);
    v[37] = NAN;
    write_tensor(t.file("in.h5"), v, {4, 16});
    const Result r = run("quantize --input " + t.file("in.h5") + ":/x --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("element 37") != std::string::npos);
    require_no_output(out);
    const Result ok = run("quantize --input " + t.file("in.h5") + ":/x --allow-nonfinite --out " + out);
    CHECK(ok.status == 0);
    CHECK(fs::exists(out));
  }
  SECTION("unknown option") {
    const Result r = run("quantize --generate normal --frobnicate 3 --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("frobnicate") != std::string::npos);
    require_no_output(out);
  }
  SECTION("unknown recipe") {
    const Result r = run("quantize --generate normal --recipe nvfp5 --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("nvfp5") != std::string::npos);
    require_no_output(out);
  }
  SECTION("unsupported option combination") {
    const Result r = run("quantize --generate normal --format mxfp4 --layout 16x16 --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("16x16") != std::string::npos);
    require_no_output(out);
  }
  SECTION("RHT that does not divide the axis") {
    const Result r = run("quantize --generate normal --shape 40x32 --recipe nvfp4-rht --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("40") != std::string::npos);
    require_no_output(out);
  }
  SECTION("output directory missing") {
    const Result r = run("quantize --generate normal --shape 16x16 --out " + t.file("no/such/dir/q.h5"));
    CHECK(r.status == 2);
    CHECK(r.err.find("does not exist") != std::string::npos);
  }
  SECTION("both --input and --generate") {
    const Result r = run("quantize --generate normal --input a.h5:/x --out " + out);
    CHECK(r.status == 2);
    require_no_output(out);
  }
}

TEST_CASE("gemm: every role and recipe runs, the error split is exact, errors order as the formats imply") {
  for (const char* role : {"fprop", "dgrad", "wgrad"}) {
    const Result r = run(std::string("gemm --role ") + role + " --m 32 --n 48 --k 64 --recipe all --json");
    INFO(role << ": " << r.err);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("\"split_exact\":false") == std::string::npos);
    CHECK(r.out.find("\"name\":\"nvfp4-plain\"") != std::string::npos);
  }
  TempDir t;
  const std::string out = t.file("g.h5");
  const Result r = run("gemm --role fprop --m 32 --n 32 --k 48 --recipe bf16,nvfp4 --save-tensors --out " + out);
  REQUIRE(r.status == 0);
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  const fp4d::h5::Group root = f.root();
  CHECK(root.get_attr_string("schema") == "fp4drift.gemm");
  CHECK(root.get_attr_string("status") == "complete");
  CHECK(root.is_dataset("exact"));
  CHECK(root.is_dataset("recipes/nvfp4/A/codes"));
  // BF16 keeps 8 significant bits, NVFP4 2: its quantization error must be the larger by far.
  CHECK(root.open_group("recipes/bf16").get_attr_double("quantization_rel_frobenius") * 10 <
        root.open_group("recipes/nvfp4").get_attr_double("quantization_rel_frobenius"));
}

TEST_CASE("gemm: bad input is refused with one line and no output") {
  TempDir t;
  const std::string out = t.file("g.h5");
  SECTION("unknown role") {
    const Result r = run("gemm --role bprop --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("bprop") != std::string::npos);
    require_no_output(out);
  }
  SECTION("unknown recipe") {
    const Result r = run("gemm --recipe nvfp5 --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("nvfp5") != std::string::npos);
    require_no_output(out);
  }
  SECTION("operand of the wrong shape") {
    write_tensor(t.file("w.h5"), std::vector<float>(16 * 16, 1.0f), {16, 16});
    const Result r = run("gemm --role fprop --m 16 --n 32 --k 16 --input-second " + t.file("w.h5") + ":/x --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("32 x 16") != std::string::npos);
    require_no_output(out);
  }
  SECTION("RHT needs the token dimension in multiples of 16") {
    const Result r = run("gemm --role wgrad --m 40 --recipe nvfp4 --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("multiple of 16") != std::string::npos);
    require_no_output(out);
  }
}

TEST_CASE("accumulator --model-check needs a device: without one it is refused before any output") {
  // This suite runs where no GPU is usable (or fp4drift has no CUDA): the check compares the
  // model with a device's GEMMs, so it must say why it cannot, not report an empty agreement.
  const TempDir t;
  const std::string out = t.file("check.json");
  const Result r = run("accumulator --model-check --out " + out);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("accumulator: ") != std::string::npos);
  CHECK(r.out.find("model vs cuBLASLt") == std::string::npos);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("gemm --accumulator: the accumulation split at sequential FP32, exact accumulation, bad values") {
  const auto recipes_of = [](const Result& r) {
    INFO(r.err);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.out)["recipes"];
  };
  for (const char* acc : {"fp32-sequential", "sm90", "exact"}) {
    INFO(acc);
    const auto recipes = recipes_of(run(std::string("gemm --role fprop --m 24 --n 40 --k 80 --recipe bf16,nvfp4,mxfp4 --json --accumulator ") + acc));
    REQUIRE(recipes.size() == 3);
    for (const auto& o : recipes) {
      CHECK(o["accumulator"] == acc);
      CHECK(o["split_exact"] == true);
      // The split's two parts add up (means are linear; the parts are exact differences).
      const double whole = o["accumulation"]["bias"], seq = o["accumulation_fp32_sequential"]["bias"],
                   beyond = o["accumulation_beyond_fp32_sequential"]["bias"];
      CHECK(std::fabs(whole - (seq + beyond)) <= 1e-12 * (std::fabs(seq) + std::fabs(beyond)) + 1e-300);
      if (std::string(acc) == "fp32-sequential") CHECK(o["accumulation_beyond_fp32_sequential"]["rel_frobenius"] == 0.0);
      // Exact accumulation leaves one rounding to float32 (and for NVFP4 the product with g):
      // each output within 2 u (1 + u) of the exact product of the quantized operands.
      if (std::string(acc) == "exact") CHECK(o["accumulation"]["rel_frobenius"].get<double>() <= 2 * std::ldexp(1.0, -24) * (1 + std::ldexp(1.0, -24)));
    }
  }
  SECTION("fp8-tensor under sm90: partial sums promoted to FP32, or fast accumulation's one accumulator") {
    // K = 384: three promotion chunks. One tensor-core accumulator over all of K (fast) loses more
    // than FP32 promotion every 128 products.
    const std::string cmd = "gemm --role fprop --m 24 --n 40 --k 384 --recipe fp8-tensor --json --accumulator sm90";
    const auto promoted = recipes_of(run(cmd)), fast = recipes_of(run(cmd + " --fp8-fast-accumulation"));
    REQUIRE(promoted.size() == 1);
    REQUIRE(fast.size() == 1);
    for (const auto* o : {&promoted[0], &fast[0]}) {
      CHECK((*o)["accumulator"] == "sm90");
      CHECK((*o)["split_exact"] == true);
      CHECK((*o)["accumulation_beyond_fp32_sequential"]["rel_frobenius"].get<double>() > 0.0);
    }
    CHECK(fast[0]["accumulation"]["rel_frobenius"].get<double>() >
          promoted[0]["accumulation"]["rel_frobenius"].get<double>());
  }
  SECTION("SR's own bias is separated from the other operand's rounding") {
    // dgrad: dY stochastically rounded, W (16x16 tiles) deterministic. An unbiased SR leaves its
    // own bias at the noise of the 64-draw mean (the estimate's expected square equals the
    // noise's square; over 2,048 outputs the ratio concentrates within a few per cent, so a
    // factor 2 either way is far out). W's rounding (NVFP4: ~0.12 of the product) is then about
    // 6 times the noise (SR's spread ~0.15 / sqrt(64)): at least 3 times is asserted.
    const auto recipes = recipes_of(run("gemm --role dgrad --m 32 --n 48 --k 64 --recipe nvfp4 --sr-draws 64 --json"));
    const auto& o = recipes.at(0);
    const double own = o["sr_own_rel_bias"], det = o["sr_deterministic_rel_bias"], noise = o["sr_mean_rel_noise"];
    CHECK(own > 0.5 * noise);
    CHECK(own < 2 * noise);
    CHECK(det > 3 * own);
  }
  SECTION("bad values") {
    Result r = run("gemm --accumulator fp32");
    CHECK(r.status == 2);
    CHECK(r.err.find("fp32-sequential, sm90, exact") != std::string::npos);
    CHECK(lines(r.err) == 1);
    // Block-scaled FP8 is not modelled under sm90 (per-tensor FP8 is: the section below).
    r = run("gemm --accumulator sm90 --recipe fp8");
    CHECK(r.status == 2);
    CHECK(r.err.find("sm90 models FP8 GEMMs with per-tensor scaling only (recipe fp8 ") != std::string::npos);
    CHECK(lines(r.err) == 1);
    r = run("gemm --recipe fp8-tensor --fp8-fast-accumulation");
    CHECK(r.status == 2);
    CHECK(r.err.find("--accumulator sm90") != std::string::npos);
    CHECK(lines(r.err) == 1);
    r = run("gemm --backend cuda --accumulator exact");
    CHECK(r.status == 2);
    CHECK(r.err.find("only sm90") != std::string::npos);
  }
}

TEST_CASE("gemm --reference-precision: a double reference is certified to double's digits, not more") {
  TempDir t;
  const std::string out = t.file("g.h5");
  const Result r = run("gemm --m 32 --n 32 --k 256 --recipe nvfp4 --reference-precision double --out " + out);
  REQUIRE(r.status == 0);
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  const double digits = f.root().get_attr_double("float_reference_certified_digits");
  // Summing 256 products in double loses a few digits at most: between 12 and 17 are right.
  CHECK(digits > 12.0);
  CHECK(digits < 17.5);
  CHECK(f.root().get_attr_double("float_reference_max_rel_vs_exact") < 1e-12);
  CHECK(run("gemm --reference-precision mp99").status == 2);
}

TEST_CASE("gemm: composable nvfp4 recipe names switch the techniques off") {
  TempDir t;
  const std::string out = t.file("g.h5");
  // Wgrad has no weight operand, so nvfp4-no-rht-no-sr quantizes exactly as nvfp4-plain.
  const Result r = run("gemm --role wgrad --m 32 --n 16 --k 16 --recipe nvfp4-plain,nvfp4-no-rht-no-sr,nvfp4 --out " + out);
  REQUIRE(r.status == 0);
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  const fp4d::h5::Group root = f.root();
  const double plain = root.open_group("recipes/nvfp4-plain").get_attr_double("total_rel_frobenius");
  CHECK(root.open_group("recipes/nvfp4-no-rht-no-sr").get_attr_double("total_rel_frobenius") == plain);
  CHECK(root.open_group("recipes/nvfp4").get_attr_double("total_rel_frobenius") != plain);
  CHECK(run("gemm --recipe nvfp4-no-sr-no-sr").status == 2);  // a modifier twice is refused
}

namespace {
std::string write_text(const TempDir& d, const std::string& name, const std::string& text) {
  const std::string p = d.file(name);
  std::ofstream(p) << text;
  return p;
}
const char* kStagnatingSum = "workload = \"sum\"\n[sum]\nterms = \"constant\"\nn = 5000\nformat = \"fp16\"\nrounding = \"rne\"\n";
}  // namespace

TEST_CASE("run: a sum config writes a complete trace whose values theory predicts") {
  TempDir d;
  const std::string cfg = write_text(d, "s.toml", kStagnatingSum), out = d.file("s.h5");
  const Result r = run("run " + cfg + " --out " + out);
  REQUIRE(r.status == 0);
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  fp4d::h5::Group root = f.root();
  CHECK(root.get_attr_string("schema") == "fp4drift.run");
  CHECK(root.get_attr_string("status") == "complete");
  CHECK(root.get_attr_string("workload") == "sum");
  CHECK(root.get_attr_string("config") == kStagnatingSum);  // verbatim, for provenance
  fp4d::h5::Dims dims;
  const std::vector<std::int64_t> n = root.read<std::int64_t>("sum_dot/n");
  const std::vector<double> computed = root.read<double>("sum_dot/computed", &dims);
  REQUIRE(dims.size() == 2);
  REQUIRE(dims[1] == 1);
  REQUIRE(n.size() == computed.size());
  // FP16 has 11 significand bits: ones sum exactly up to 2^11 = 2048, then 2048 + 1 ties to
  // the even 2048 and the sum stays there.
  for (std::size_t i = 0; i < n.size(); ++i) {
    INFO("n = " << n[i]);
    CHECK(computed[i] == static_cast<double>(std::min<std::int64_t>(n[i], 2048)));
  }
  CHECK(n.back() == 5000);
  CHECK(root.read<std::int64_t>("sum_dot/first_stagnation") == std::vector<std::int64_t>{2049});
}

TEST_CASE("run: --steps overrides the length; --json prints the points") {
  TempDir d;
  const std::string cfg = write_text(d, "s.toml", kStagnatingSum);
  const Result r = run("run " + cfg + " --steps 100 --json");
  REQUIRE(r.status == 0);
  CHECK(r.out.find("\"n\":100,") != std::string::npos);
  CHECK(r.out.find("\"n\":128") == std::string::npos);
}

TEST_CASE("run: bad configs and options are refused with one line naming the problem, no output") {
  TempDir d;
  const std::string out = d.file("o.h5");
  const std::pair<std::string, std::string> cases[] = {
      {"workload = \"sum\"\n[sum]\nn = 10\nterms = \"constant\"\nformt = \"fp16\"\n",
       "unknown config key 'sum.formt' (did you mean 'sum.format'?)"},
      {"workload = \"sum\"\n[sum]\nnn = 10\nterms = \"constant\"\n", "missing key 'sum.n' (did you mean 'sum.nn' at line 3?)"},
      {"workload = \"sum\"\n[sum]\nn = 10\nterms = \"constnt\"\n", "unknown term kind 'constnt'"},
      {"workload = \"sum\"\n[sum]\nn = 0\nterms = \"constant\"\n", "'sum.n': must be in [1, 2^34]"},
      {"workload = \"sum\"\n[sum]\nn = 10\nterms = \"constant\"\nformat = \"fp64\"\n", "sum.format"},
      {"workload = \"sum\"\n[sum]\nn = 10\nterms = \"constant\"\nruns = 4\n", "only makes sense with rounding = \"sr\""},
      {"workload = \"sum\"\n[sum]\nn = \"ten\"\nterms = \"constant\"\n", "'sum.n' must be an integer, got a string"},
      {"workload = \"sums\"\n", "must be sum, dot, mlp or lm"},
      {"[sum]\nn = 1\n", "missing key 'workload'"},
  };
  for (const auto& [text, want] : cases) {
    INFO(text);
    const Result r = run("run " + write_text(d, "bad.toml", text) + " --out " + out);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(want) != std::string::npos);
    require_no_output(out);
  }
  const std::string good = write_text(d, "good.toml", kStagnatingSum);
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"run " + d.file("missing.toml"), "does not exist"},
           {"run " + good + " --backend cuda", "runs on the CPU only"},
           {"run " + good + " --resume", "nothing to resume"},
           {"run " + good + " --backend tpu", "--backend must be cpu or cuda"}}) {
    INFO(args);
    const Result r = run(args + " --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find(want) != std::string::npos);
    require_no_output(out);
  }
}

TEST_CASE("run: every shipped config in data/configs passes --check and runs (short)") {
  TempDir d;
  for (const auto& e : fs::directory_iterator(FP4DRIFT_SOURCE_DIR "/data/configs")) {
    if (e.path().extension() != ".toml") continue;
    INFO(e.path().string());
    const Result c = run("run " + e.path().string() + " --check", FP4DRIFT_SOURCE_DIR);
    CHECK(c.status == 0);
    CHECK(c.out.find("a valid") != std::string::npos);
    // Configs sized for the H200 (data/configs/README.md) are checked, not run: one step of
    // them is hours of CPU emulation.
    if (e.path().stem().string().find("-h200") != std::string::npos) continue;
    // From the repository root, where the configs' relative data paths point (as a user runs them).
    const Result r = run("run " + e.path().string() + " --steps 64 --json --out " + d.file(e.path().stem().string() + ".h5"),
                         FP4DRIFT_SOURCE_DIR);
    CHECK(r.status == 0);
    CHECK(r.err.empty());
  }
}

namespace {
const char* kTinyMlp =
    "workload = \"mlp\"\n[mlp]\nwidths = [16, 32, 8]\nbatch = 16\nsteps = 30\nlr = 0.05\n"
    "[recipes]\nnames = [\"fp32\", \"nvfp4\"]\nhigh_precision_layers = [0]\n"
    "[reference]\ncompare_every = 5\n[trace]\nflush_every = 10\n";
}  // namespace

TEST_CASE("run mlp: a complete trace with every record, the fp32 run next to the reference") {
  TempDir d;
  const std::string cfg = write_text(d, "m.toml", kTinyMlp), out = d.file("m.h5");
  const Result r = run("run " + cfg + " --out " + out);
  REQUIRE(r.status == 0);
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  fp4d::h5::Group root = f.root();
  CHECK(root.get_attr_string("status") == "complete");
  CHECK(root.get_attr_string("workload") == "mlp");
  const std::vector<std::int64_t> step = root.read<std::int64_t>("mlp/step");
  REQUIRE(step.size() == 30);
  CHECK(step.front() == 0);
  CHECK(step.back() == 29);
  CHECK(root.read<std::int64_t>("mlp/compare_step") == std::vector<std::int64_t>{5, 10, 15, 20, 25, 30});
  fp4d::h5::Dims dims;
  const std::vector<double> werr = root.read<double>("mlp/runs/nvfp4/weight_rel_error", &dims);
  CHECK(dims == fp4d::h5::Dims{6, 2});
  // fp32 (no quantization, float32 arithmetic) stays within float32 rounding of the double
  // reference: each step's GEMMs (reduction length K <= 32) perturb the weights by at most
  // about K u relative, so k = 30 steps give k K u = 30 * 32 * 2^-24 = 5.7e-5 < 1e-4 to first
  // order (no amplification by the dynamics over so few steps). NVFP4 (4-bit operands, NMSE
  // ~1e-2) lands orders of magnitude further.
  const std::vector<double> gap32 = root.read<double>("mlp/runs/fp32/rel_loss_gap");
  const std::vector<double> w32 = root.read<double>("mlp/runs/fp32/weight_rel_error");
  for (const double g : gap32) CHECK(std::fabs(g) < 1e-4);
  CHECK(w32.back() < 1e-4);
  CHECK(w32.back() > 0);
  CHECK(werr.back() > 100 * w32.back());
  // The local-error probe at each run's own weights: the fp32 gradient is the exact one up to
  // float32 rounding (reductions <= 32 long, two layers: well below 1e-5 relative), NVFP4's
  // 4-bit operands move it by percents.
  const std::vector<double> gc32 = root.read<double>("mlp/runs/fp32/grad_cosine", &dims);
  CHECK(dims == fp4d::h5::Dims{6, 2});
  for (const double c : gc32) CHECK(c > 1 - 1e-9);
  for (const double e : root.read<double>("mlp/runs/fp32/grad_rel_error")) CHECK(e < 1e-5);
  const std::vector<double> gerr4 = root.read<double>("mlp/runs/nvfp4/grad_rel_error");
  CHECK(gerr4.back() > 1e-2);  // layer 1 (NVFP4)
  // Without SR there is one draw: the SR-mean error is the single-draw error itself. With SR
  // (nvfp4 gradients) the 4 draws differ, so the mean differs from draw 0.
  CHECK(root.read<double>("mlp/runs/fp32/grad_sr_mean_rel_error") == root.read<double>("mlp/runs/fp32/grad_rel_error"));
  CHECK(root.read<double>("mlp/runs/nvfp4/grad_sr_mean_rel_error") != gerr4);
  // The nvfp4 run recorded its operands' quantization error; layer 0 runs in BF16 (edge).
  const std::vector<double> nmse = root.read<double>("mlp/runs/nvfp4/operand_nmse", &dims);
  CHECK(dims == fp4d::h5::Dims{30, 12});
  CHECK(nmse[0] < 1e-4);        // layer 0, fprop X: BF16
  CHECK(nmse[6] > 1e-3);        // layer 1, fprop X: NVFP4
}

TEST_CASE("run mlp: [recipes] accumulator changes the CPU emulation's GEMMs, and only known names pass") {
  TempDir d;
  const auto config = [&](const std::string& acc) {
    return write_text(d, "a-" + acc + ".toml",
                      "workload = \"mlp\"\n[mlp]\nwidths = [64, 128, 16]\nbatch = 64\nsteps = 12\nlr = 0.05\n"
                      "[recipes]\nnames = [\"bf16\", \"nvfp4\"]\naccumulator = \"" + acc + "\"\n"
                      "[reference]\ncompare_every = 4\n[trace]\nflush_every = 6\n");
  };
  std::map<std::string, std::vector<double>> bf16_loss;
  for (const std::string acc : {"fp32-sequential", "sm90", "exact"}) {
    const std::string out = d.file(acc + ".h5");
    const Result r = run("run " + config(acc) + " --out " + out);
    INFO(acc << ": " << r.err);
    REQUIRE(r.status == 0);
    fp4d::h5::File f = fp4d::h5::File::open_read(out);
    bf16_loss[acc] = f.root().read<double>("mlp/runs/bf16/loss");
    CHECK(f.root().get_attr_string("config").find("accumulator = \"" + acc + "\"") != std::string::npos);
  }
  // BF16 products summed over K = 64 .. 128: truncating alignment and round-to-nearest differ
  // in some output (the forward GEMMs of the first step already), so the runs part ways.
  REQUIRE(bf16_loss["sm90"].size() == 12);
  CHECK(bf16_loss["sm90"] != bf16_loss["fp32-sequential"]);
  CHECK(bf16_loss["exact"] != bf16_loss["fp32-sequential"]);
  const Result bad = run("run " + config("fp32") + " --out " + d.file("bad.h5"));
  CHECK(bad.status == 2);
  CHECK(bad.err.find("recipes.accumulator") != std::string::npos);
  CHECK(bad.err.find("fp32-sequential, sm90, exact") != std::string::npos);
  require_no_output(d.file("bad.h5"));
  // sm90 models FP8 with per-tensor scaling only: a config with the block-scaled fp8 recipe is
  // refused before any trace exists; fp8-tensor runs.
  const auto fp8_config = [&](const std::string& recipe) {
    return write_text(d, recipe + ".toml",
                      "workload = \"mlp\"\n[mlp]\nwidths = [16, 32, 8]\nbatch = 16\nsteps = 3\n"
                      "[recipes]\nnames = [\"bf16\", \"" + recipe + "\"]\naccumulator = \"sm90\"\n");
  };
  const Result no_fp8 = run("run " + fp8_config("fp8") + " --out " + d.file("fp8.h5"));
  CHECK(no_fp8.status == 2);
  CHECK(no_fp8.err.find("recipes.accumulator") != std::string::npos);
  CHECK(no_fp8.err.find("models FP8 GEMMs with per-tensor scaling only (recipe 'fp8' scales FP8 operands in 1x128 "
                        "and 128x128 blocks") != std::string::npos);
  CHECK(lines(no_fp8.err) == 1);
  require_no_output(d.file("fp8.h5"));
  const Result fp8_tensor = run("run " + fp8_config("fp8-tensor") + " --out " + d.file("fp8-tensor.h5"));
  INFO(fp8_tensor.err);
  CHECK(fp8_tensor.status == 0);
  fp4d::h5::File f = fp4d::h5::File::open_read(d.file("fp8-tensor.h5"));
  CHECK(f.root().read<double>("mlp/runs/fp8-tensor/loss").size() == 3);
}

TEST_CASE("run mlp: reference off - the same low-precision losses, no reference, no compares") {
  TempDir d;
  const std::string on = d.file("on.h5"), off = d.file("off.h5");
  REQUIRE(run("run " + write_text(d, "on.toml", kTinyMlp) + " --out " + on).status == 0);
  std::string cfg = kTinyMlp;  // [reference] enabled = false
  cfg.insert(cfg.find("compare_every"), "enabled = false\n");
  const Result r = run("run " + write_text(d, "off.toml", cfg) + " --out " + off + " --json");
  REQUIRE(r.status == 0);
  INFO(r.err);
  fp4d::h5::File a = fp4d::h5::File::open_read(on), b = fp4d::h5::File::open_read(off);
  CHECK(b.root().get_attr_string("status") == "complete");
  // The low-precision runs never read the reference: bit-identical losses and operand stats.
  for (const char* ds : {"mlp/runs/fp32/loss", "mlp/runs/nvfp4/loss", "mlp/runs/nvfp4/operand_nmse"})
    CHECK(a.root().read<double>(ds) == b.root().read<double>(ds));
  CHECK(b.root().read<std::int64_t>("mlp/compare_step").empty());
  for (const double v : b.root().read<double>("mlp/reference/loss")) CHECK(std::isnan(v));
  for (const double v : b.root().read<double>("mlp/runs/nvfp4/rel_loss_gap")) CHECK(std::isnan(v));
  CHECK(b.root().open_group("mlp/reference").get_attr_int64("first_nonfinite_step") == -1);
  CHECK(r.out.find("\"final_last_layer_weight_rel_error\":null") != std::string::npos);
}

TEST_CASE("run mlp: output rules and config errors") {
  TempDir d;
  const std::string cfg = write_text(d, "m.toml", kTinyMlp), out = d.file("m.h5");
  CHECK(run("run " + cfg).err.find("needs --out") != std::string::npos);
  CHECK(run("run " + cfg + " --out " + out + " --resume").err.find("does not exist") != std::string::npos);
  REQUIRE(run("run " + cfg + " --out " + out).status == 0);
  const Result again = run("run " + cfg + " --out " + out);
  CHECK(again.status == 2);
  CHECK(again.err.find("exists: use --resume") != std::string::npos);
  CHECK(run("run " + cfg + " --out " + out + " --resume").err.find("is complete") != std::string::npos);
  const std::string other = d.file("o.h5");
  const std::pair<std::string, std::string> cases[] = {
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\nwidht = 3\n", "unknown config key 'mlp.widht'"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 12\n[recipes]\nnames = [\"nvfp4\"]\n", "multiple of 16"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\n[recipes]\nnames = [\"nvfp5\"]\n", "recipes.names"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\n[recipes]\nhigh_precision_layers = [4]\n", "layer 4 does not exist"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\noptimizer = \"lion\"\n", "must be sgd or adamw"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\n[reference]\nprecision = \"float80\"\n", "unknown reference precision 'float80'"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\n[reference]\nprecision = \"mp256\"\ncheck_precision = \"binary128\"\n", "must be wider than reference.precision"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\n[reference]\ncheck_precision = \"quad\"\n", "reference.check_precision"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\n[reference]\nenabled = false\ncheck_precision = \"binary128\"\n", "needs the reference"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\nactivation = \"swish\"\n", "mlp.activation"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\nnorm = \"layernorm\"\n", "mlp.norm"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\nnorm_eps = 0\n", "norm_eps"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 8]\nbatch = 16\nresidual = 1\n", "mlp.residual"},
      {"workload = \"mlp\"\n[mlp]\nwidths = [16, 32, 8]\nbatch = 16\nresidual = true\n", "'mlp.residual': is set but no hidden layer"},
  };
  for (const auto& [text, want] : cases) {
    INFO(text);
    const Result r = run("run " + write_text(d, "bad.toml", text) + " --out " + other);
    CHECK(r.status == 2);
    CHECK(r.err.find(want) != std::string::npos);
    require_no_output(other);
  }
}

TEST_CASE("run lm: a complete trace; bad configs and token files are one line, exit 2, no trace") {
  TempDir d;
  const std::string head = "workload = \"lm\"\n[lm]\nsteps = 6\nvocab = 16\nd_model = 32\nheads = 2\nffn = 32\n"
                           "seq_len = 16\nbatch = 2\n";
  const std::string cfg = write_text(d, "lm.toml", head + "[data]\nzipf_support = 4\n"), out = d.file("lm.h5");
  const Result ok = run("run " + cfg + " --out " + out + " --json");
  REQUIRE(ok.status == 0);
  const auto j = nlohmann::json::parse(ok.out);
  CHECK(j["workload"] == "lm");
  CHECK(j["runs"].size() == 2);
  CHECK(run("run " + cfg + " --out " + out).err.find("exists: use --resume") != std::string::npos);
  // A token file with an id >= vocab at position 7, and one of floats.
  {
    std::vector<std::uint16_t> ids(200, 3);
    ids[7] = 16;
    fp4d::h5::File f = fp4d::h5::File::create(d.file("bad_ids.h5"));
    f.root().write("train", ids, fp4d::h5::Dims{ids.size()});
    fp4d::h5::File g = fp4d::h5::File::create(d.file("floats.h5"));
    g.root().write("train", std::vector<float>(200, 1.0f), fp4d::h5::Dims{200});
  }
  const std::string other = d.file("o.h5");
  const std::pair<std::string, std::string> cases[] = {
      {"workload = \"lm\"\n[lm]\npattern = \"AFX\"\n", "'lm.pattern'"},
      {"workload = \"lm\"\n[lm]\npattern = \"FF\"\n", "no sequence mixer"},
      {head + "pattern = \"MF\"\n[lm.mamba]\nchunk = 5\n", "'lm.mamba.chunk'"},
      {head + "pattern = \"MF\"\n[lm.mamba]\nhead_dim = 4\nwidth = 5\n", "unknown config key 'lm.mamba.width'"},
      {"workload = \"lm\"\n[lm]\nd_model = 64\nheads = 3\n", "'lm.heads'"},
      {head + "[recipes]\nnames = [\"mxfp4\"]\n", "blocks of 32"},
      {"workload = \"lm\"\n[lm]\nseq_len = 15\nbatch = 1\n", "does not tile"},
      {head + "[data]\nsource = \"" + d.file("bad_ids.h5") + "\"\n", "'data.source'"},
      {head + "[data]\nsource = \"" + d.file("floats.h5") + "\"\n", "'data.source'"},
      {head + "[data]\nsource = \"" + d.file("missing.h5") + "\"\n", "'data.source'"},
      {head + "[lm.optimizer]\nschedule = \"linear\"\n", "lm.optimizer.schedule"},
      {head + "dropout = 0.1\n", "unknown config key 'lm.dropout'"},
      {head + "[reference]\nprecision = \"mp64\"\n", "(known: double, binary128, mp256)"},
      {head + "[reference]\ncheck_precision = \"mp256\"\n", "'reference.check_precision'"},
  };
  for (const auto& [text, want] : cases) {
    INFO(text);
    const Result r = run("run " + write_text(d, "bad.toml", text) + " --out " + other);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(want) != std::string::npos);
    require_no_output(other);
    CHECK(run("run " + d.file("bad.toml") + " --check").status == 2);  // --check refuses what a run would
  }
}

TEST_CASE("run lm: an mp256 reference is recorded, printed and checkpointed as 5 exact limbs") {
  TempDir d;
  const std::string cfg = write_text(d, "w.toml",
                                     "workload = \"lm\"\n[lm]\nsteps = 2\nvocab = 16\nd_model = 16\nheads = 2\n"
                                     "ffn = 16\nseq_len = 8\nbatch = 2\npattern = \"AF\"\n[data]\nzipf_support = 4\n"
                                     "[recipes]\nnames = [\"fp32\"]\n[reference]\nprecision = \"mp256\"\n");
  const std::string out = d.file("w.h5");
  const Result r = run("run " + cfg + " --out " + out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("reference (mp256): final loss") != std::string::npos);
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  CHECK(f.root().open_group("lm").get_attr_string("reference_precision") == "mp256");
  fp4d::h5::Dims dims;
  (void)f.root().read<double>("lm/checkpoint/reference_p_0", &dims);  // the embedding, 16 x 16
  CHECK(dims == fp4d::h5::Dims{16 * 16, 5});
}

TEST_CASE("run mlp: swiglu, rmsnorm and residual are recorded, and fp32 stays with the reference") {
  TempDir d;
  const std::string cfg = write_text(d, "s.toml",
                                     "workload = \"mlp\"\n[mlp]\nwidths = [16, 32, 32, 8]\nbatch = 16\nsteps = 10\n"
                                     "activation = \"swiglu\"\nnorm = \"rmsnorm\"\nnorm_eps = 1e-5\nresidual = true\n"
                                     "[recipes]\nnames = [\"fp32\"]\n[reference]\ncompare_every = 5\n");
  const std::string out = d.file("s.h5");
  REQUIRE(run("run " + cfg + " --out " + out).status == 0);
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  fp4d::h5::Group m = f.root().open_group("mlp");
  CHECK(m.get_attr_string("activation") == "swiglu");
  CHECK(m.get_attr_string("norm") == "rmsnorm");
  CHECK(m.get_attr_double("norm_eps") == 1e-5);
  CHECK(m.get_attr_bool("residual"));
  // The gated layers' weights are [gate; up]: 2 * 32 rows (checkpoint, one dataset per layer).
  CHECK(f.root().read<float>("mlp/checkpoint/run_0_w_0").size() == 64 * 16);
  CHECK(f.root().read<float>("mlp/checkpoint/run_0_w_2").size() == 8 * 32);
  // The fp32 run within float32 rounding of the reference (k K u = 10 * 32 * 2^-24 ~ 2e-5,
  // the same first-order argument as the relu trace above).
  const std::vector<double> w32 = f.root().read<double>("mlp/runs/fp32/weight_rel_error");
  CHECK(w32.back() < 1e-4);
  CHECK(w32.back() > 0);
}

TEST_CASE("run mlp: an mp256 reference, and the double reference's own error checked in binary128") {
  TempDir d;
  const std::string base =
      "workload = \"mlp\"\n[mlp]\nwidths = [16, 32, 8]\nbatch = 16\nsteps = 10\n[recipes]\nnames = [\"fp32\"]\n"
      "[reference]\ncompare_every = 5\n";
  const std::string wide = d.file("w.h5"), checked = d.file("c.h5");
  REQUIRE(run("run " + write_text(d, "w.toml", base + "precision = \"mp256\"\n") + " --out " + wide).status == 0);
  REQUIRE(run("run " + write_text(d, "c.toml", base + "check_precision = \"binary128\"\n") + " --out " + checked).status == 0);
  fp4d::h5::File w = fp4d::h5::File::open_read(wide), c = fp4d::h5::File::open_read(checked);
  CHECK(w.root().open_group("mlp").get_attr_string("reference_precision") == "mp256");
  CHECK(c.root().open_group("mlp").get_attr_string("reference_precision") == "double");
  CHECK(c.root().open_group("mlp").get_attr_string("check_precision") == "binary128");
  // The mp256 checkpoint holds 5 exact double limbs per value (32 x 16 weights of layer 0).
  fp4d::h5::Dims dims;
  (void)w.root().read<double>("mlp/checkpoint/reference_w_0", &dims);
  CHECK(dims == fp4d::h5::Dims{32 * 16, 5});
  // The two references' losses agree far beyond float32 (10 steps, reductions <= 32: the
  // double run's error is ~k K u_53 ~ 1e-14 relative in W, test_mlp derives the digits).
  const std::vector<double> lw = w.root().read<double>("mlp/reference/loss"), lc = c.root().read<double>("mlp/reference/loss");
  REQUIRE(lw.size() == lc.size());
  for (std::size_t i = 0; i < lw.size(); ++i) CHECK(std::fabs(lw[i] - lc[i]) <= 1e-12 * lw[i]);
  // The double reference's one-step error against binary128: one step's rounding, a few u_53
  // relative in W (> 0: it is not the same arithmetic) - far below the fp32 run's ~1e-7.
  const std::vector<double> ew = c.root().read<double>("mlp/reference/check_weight_rel_error", &dims);
  CHECK(dims == fp4d::h5::Dims{2, 2});
  for (const double e : ew) {
    CHECK(e > 0);
    CHECK(e < 1e-14);
  }
  CHECK(c.root().read<double>("mlp/reference/check_loss_rel_error").size() == 2);
}

TEST_CASE("bench mlp-ref runs and reports the fraction of Eigen's double GEMM rate") {
  const Result r = run("bench mlp-ref --width 32 --batch 32 --repeat 1 --json");
  REQUIRE(r.status == 0);
  CHECK(r.out.find("\"fraction_of_eigen\":") != std::string::npos);
  CHECK(run("bench mlp-ref --width 4").status == 2);
}

TEST_CASE("bench lm-ref times the reference and every recipe's CPU step of an lm config") {
  const Result r = run("bench lm-ref --repeat 1 --json", FP4DRIFT_SOURCE_DIR);  // default: data/configs/lm-quick.toml
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["parameters"] == 82240);  // lm-quick's model: lm_params of d 64, AFAF, vocab 64, untied
  CHECK(j["reference_ms"].get<double>() > 0);
  CHECK(j["reference_precision"] == "double");  // lm-quick's [reference] precision
  REQUIRE(j["runs"].size() == 2);
  CHECK(j["runs"][0]["recipe"] == "nvfp4");
  {  // --precision times the reference in another precision (a small model: binary128 is ~300x double)
    TempDir d;
    const std::string cfg = write_text(d, "s.toml",
                                       "workload = \"lm\"\n[lm]\nvocab = 16\nd_model = 16\nheads = 2\nffn = 16\n"
                                       "seq_len = 8\nbatch = 2\npattern = \"AF\"\n[data]\nzipf_support = 4\n"
                                       "[recipes]\nnames = [\"fp32\"]\n");
    const Result w = run("bench lm-ref --config " + cfg + " --precision binary128 --repeat 1 --json");
    REQUIRE(w.status == 0);
    const auto jw = nlohmann::json::parse(w.out);
    CHECK(jw["reference_precision"] == "binary128");
    CHECK(jw["reference_ms"].get<double>() > 0);
    const Result q = run("bench lm-ref --config " + cfg + " --precision quad");
    CHECK(q.status == 2);
    CHECK(q.err.find("(known: double, binary128, mp256)") != std::string::npos);
  }
  CHECK(run("bench quantize --precision double").status == 2);  // lm-ref's option only
  const Result bad = run("bench lm-ref --config " FP4DRIFT_SOURCE_DIR "/data/configs/mlp-quick.toml");
  CHECK(bad.status == 2);
  CHECK(bad.err.find("not an lm config") != std::string::npos);
  CHECK(run("bench lm-ref --width 64").status == 2);  // another benchmark's option
}

TEST_CASE("run mlp: a diverging run is reported as such, with the step") {
  TempDir d;
  // SGD with lr = 100 on this MSE problem multiplies the weights' error by far more than 1 per
  // step: the loss overflows within a few steps in float32 and in double.
  const std::string cfg = write_text(d, "div.toml",
                                     "workload = \"mlp\"\n[mlp]\nwidths = [16, 32, 8]\nbatch = 16\nsteps = 60\n"
                                     "lr = 100.0\n[recipes]\nnames = [\"fp32\"]\n");
  const Result r = run("run " + cfg + " --out " + d.file("div.h5"));
  REQUIRE(r.status == 0);
  CHECK(r.out.find("fp32                   diverged: the loss is not finite from step") != std::string::npos);
  CHECK(r.out.find("the reference itself diverged") != std::string::npos);
  fp4d::h5::File f = fp4d::h5::File::open_read(d.file("div.h5"));
  const std::int64_t at = f.root().open_group("mlp/runs/fp32").get_attr_int64("first_nonfinite_step");
  CHECK(at > 0);
  CHECK(at < 60);
  CHECK(f.root().open_group("mlp/reference").get_attr_int64("first_nonfinite_step") > 0);
}

TEST_CASE("a recipe list that names no recipe is refused, not run as an empty table") {
  // --recipe "" or "," used to expand to no recipe at all: exit 0, an empty table and an
  // output file with status "complete" that holds no result.
  TempDir t;
  const std::string out = t.file("o.h5");
  for (const std::string args : {"quantize --generate normal --shape 16x16 --recipe ''",
                                 "quantize --generate normal --shape 16x16 --recipe ,",
                                 "gemm --m 16 --n 16 --k 16 --recipe ''", "gemm --m 16 --n 16 --k 16 --recipe ,,"}) {
    INFO(args);
    const Result r = run(args + " --out " + out);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("names no recipe") != std::string::npos);
    require_no_output(out);
  }
}

TEST_CASE("--out naming something that is not a regular file is refused before any work") {
  // The output is written as OUT.partial and renamed over OUT. A rename replaces a FIFO or a
  // device node (run as root, --out /dev/null replaced /dev/null with the trace) and fails on
  // a directory only once the whole computation is done.
  TempDir t;
  const std::string fifo = t.file("pipe.h5"), dir = t.file("dir.h5");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_directory(dir);
  const std::string cfg = write_text(t, "s.toml", kStagnatingSum);
  for (const std::string& target : std::vector<std::string>{fifo, dir})
    for (const std::string& args : std::vector<std::string>{"quantize --generate normal --shape 16x16",
                                                         "gemm --m 16 --n 16 --k 16", "run " + cfg}) {
      INFO(args << " --out " << target);
      const Result r = run(args + " --out " + target);
      CHECK(r.status == 2);
      CHECK(lines(r.err) == 1);
      CHECK(r.err.find(target) != std::string::npos);
      CHECK(r.err.find(target == dir ? "is a directory" : "is not a regular file") != std::string::npos);
      CHECK_FALSE(fs::exists(target + ".partial"));
    }
  CHECK(fs::is_fifo(fifo));
  CHECK(fs::is_directory(dir));
}

TEST_CASE("--out naming the --input file is refused: the input would be replaced") {
  TempDir t;
  const std::string in = t.file("in.h5");
  write_tensor(in, std::vector<float>(16 * 16, 1.0f), {16, 16});
  for (const std::string& args : std::vector<std::string>{
           "quantize --input " + in + ":/x --out " + in,
                                  "quantize --input " + in + ":/x --out " + t.path.string() + "/./in.h5",
                                  "gemm --m 16 --n 16 --k 16 --input-second " + in + ":/x --out " + in}) {
    INFO(args);
    const Result r = run(args);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("is also the input") != std::string::npos);
    CHECK_FALSE(fs::exists(in + ".partial"));
  }
  fp4d::h5::File f = fp4d::h5::File::open_read(in);
  CHECK(f.root().is_dataset("x"));
  CHECK_FALSE(f.root().has_attr("schema"));
}

TEST_CASE("sweep --out naming a file is refused as bad input") {
  // It used to stop with exit status 1 and "filesystem error: cannot create directories".
  TempDir t;
  const std::string file = write_text(t, "not-a-dir", "x");
  const Result r = run("sweep " FP4DRIFT_SOURCE_DIR "/data/sweeps/bench-sum.toml --out " + file);
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find(file + "' is not a directory") != std::string::npos);
}

TEST_CASE("run and sweep: a directory given as the config or sweep file is refused as such") {
  TempDir t;
  for (const std::string sub : {"run", "sweep"}) {
    const Result r = run(sub + " " + t.path.string() + " --out " + t.file("o.h5"));
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("is a directory") != std::string::npos);
  }
}

TEST_CASE("a size that does not fit in memory says so, not 'std::bad_alloc'") {
  TempDir t;
  const std::string out = t.file("q.h5");
  const Result r = run("quantize --generate normal --shape 100000000x100000000 --out " + out);  // 4e16 bytes
  // Refused before any allocation: 10^16 elements is over the per-tensor limit (a size that
  // fits the limit but not the machine is refused by the memory check, below).
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("over the limit of 2^40 elements") != std::string::npos);
  CHECK(r.err.find("bad_alloc") == std::string::npos);
  require_no_output(out);
}

namespace {

// Sets an environment variable for the fp4drift processes a test starts; restores it after.
struct ScopedEnv {
  std::string name, old;
  bool had = false;
  ScopedEnv(const std::string& n, const std::string& value) : name(n) {
    if (const char* v = std::getenv(n.c_str())) had = true, old = v;
    ::setenv(n.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

// An HDF5 file declaring a float32 dataset /x of these dims, chunked and never written: a
// few kB on disk whatever it declares.
void declare_tensor(const std::string& path, const std::vector<hsize_t>& dims) {
  const int rank = static_cast<int>(dims.size());
  const std::vector<hsize_t> chunk(dims.size(), 64);
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t s = H5Screate_simple(rank, dims.data(), nullptr);
  const hid_t p = H5Pcreate(H5P_DATASET_CREATE);
  const bool chunked = H5Pset_chunk(p, rank, chunk.data()) >= 0;
  const hid_t d = H5Dcreate2(f, "x", H5T_NATIVE_FLOAT, s, H5P_DEFAULT, p, H5P_DEFAULT);
  const bool ok = f >= 0 && s >= 0 && chunked && d >= 0;
  H5Dclose(d);
  H5Pclose(p);
  H5Sclose(s);
  H5Fclose(f);
  REQUIRE(ok);
  REQUIRE(fs::file_size(path) < 100000);
}

}  // namespace

TEST_CASE("gemm: --m/--n/--k whose operands or product overflow or pass 2^40 elements are refused, no output") {
  // --m 2^60 used to overflow into a small size and crash.
  TempDir t;
  const std::string out = t.file("g.h5");
  for (const std::string args : {"--m 1152921504606846976 --n 16 --k 16", "--m 16 --n 16 --k 1152921504606846976",
                                 "--m 2097152 --n 1048576 --k 16",  // the product: 2^41 elements
                                 "--role wgrad --m 16 --n 2097152 --k 1048576"}) {
    INFO(args);
    const Result r = run("gemm " + args + " --out " + out);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("over the limit of 2^40 elements per tensor") != std::string::npos);
    CHECK(r.err.find("--m ") != std::string::npos);
    require_no_output(out);
  }
}

TEST_CASE("quantize and gemm: sizes beyond the memory available are refused with the figures; --force-memory runs") {
  TempDir t;
  const std::string out = t.file("o.h5");
  {
    // 160 GB of input: it used to run for minutes (swapping) before failing.
    ScopedEnv mem("FP4DRIFT_MEMORY_AVAILABLE", "16000000000");
    const Result r = run("quantize --generate normal --shape 200000x200000 --out " + out);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("--shape 200000x200000 needs about ") != std::string::npos);
    CHECK(r.err.find(" GB of memory, 16.0 GB available; --force-memory to try anyway") != std::string::npos);
    require_no_output(out);
  }
  ScopedEnv mem("FP4DRIFT_MEMORY_AVAILABLE", "1000");  // 1 kB: any real run needs more
  for (const std::string args : {"quantize --generate normal --shape 64x64", "gemm --m 32 --n 32 --k 32 -r nvfp4"}) {
    INFO(args);
    const Result refused = run(args + " --out " + out);
    CHECK(refused.status == 2);
    CHECK(lines(refused.err) == 1);
    CHECK(refused.err.find("of memory, 1.00 kB available") != std::string::npos);
    require_no_output(out);
    const Result forced = run(args + " --force-memory --out " + out);
    INFO(forced.err);
    CHECK(forced.status == 0);
    CHECK(fs::exists(out));
    fs::remove(out);
  }
}

TEST_CASE("run mlp: a width over the element limit is refused from the config before a trace exists") {
  // widths = [16, 16, 2^60] used to crash the run, leaving its trace "running".
  TempDir d;
  const std::string out = d.file("m.h5");
  for (const std::string widths : {"[16, 16, 1152921504606846976]", "[16, 137438953472, 8]"}) {  // 2^60; 2^37 x 16
    INFO(widths);
    const std::string cfg = write_text(d, "huge.toml",
                                       "workload = \"mlp\"\n[mlp]\nwidths = " + widths + "\nbatch = 16\nsteps = 2\n");
    const Result r = run("run " + cfg + " --out " + out);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("huge.toml:3: 'mlp.widths'") != std::string::npos);
    CHECK(r.err.find("over the limit of 2^40 elements per tensor") != std::string::npos);
    require_no_output(out);
  }
}

TEST_CASE("quantize and gemm: an HDF5 input declaring a huge dataset is refused before it is read") {
  TempDir t;
  const std::string out = t.file("o.h5"), over = t.file("over.h5"), wraps = t.file("wraps.h5"), tera = t.file("tera.h5");
  declare_tensor(over, {hsize_t{1} << 21, hsize_t{1} << 21});   // 2^42 elements
  declare_tensor(wraps, {hsize_t{1} << 33, hsize_t{1} << 31});  // 2^64: wrapped to 0, it was reported "empty"
  declare_tensor(tera, {1000000, 1000000});                     // 10^12: under the limit, 4 TB as float32
  ScopedEnv mem("FP4DRIFT_MEMORY_AVAILABLE", "16000000000");
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"quantize --input " + over + ":/x", "over.h5:/x': 2097152 x 2097152 = 4398046511104 elements, over the limit of 2^40"},
           {"quantize --input " + wraps + ":/x", "= more than 2^63 elements, over the limit of 2^40"},
           {"quantize --input " + tera + ":/x", "(1000000 x 1000000) needs about "},
           {"gemm --m 16 --n 16 --k 16 --input-first " + tera + ":/x", "is 1000000 x 1000000, the role needs 16 x 16"},
           {"gemm --m 16 --n 16 --k 16 --input-second " + over + ":/x", "over the limit of 2^40"}}) {
    INFO(args);
    const Result r = run(args + " --out " + out);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(want) != std::string::npos);
    CHECK(r.err.find("is empty") == std::string::npos);
    require_no_output(out);
  }
}

namespace {
// An option refused as not applying: exit 2, one line naming it, no output file.
void require_refused(const std::string& args, const std::string& want, const std::string& out = "") {
  INFO(args);
  const Result r = run(args + (out.empty() ? "" : " --out " + out));
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  INFO(r.err);
  CHECK(r.err.find(want) != std::string::npos);
  if (!out.empty()) require_no_output(out);
}
}  // namespace

TEST_CASE("options are applied as recorded or refused: none is accepted and ignored") {
  TempDir t;
  const std::string out = t.file("o.h5"), gen = "quantize --generate normal --shape 64x64";
  const std::string g16 = "gemm --m 16 --n 16 --k 16";
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {gen + " --rht -16", "--rht must be 0 (off) or a power of two in [2, 256], got -16"},
           {gen + " --rht 12 --rht-signs none", "power of two in [2, 256], got 12"},
           {gen + " --rounding rne --sr-bits 8", "--sr-bits applies only with --rounding sr"},
           {gen + " --sr-bits 8", "--sr-bits applies only with --rounding sr"},
           {gen + " --rht-signs random", "--rht-signs applies only with --rht D"},
           {gen + " --rht 0 --rht-axis 1", "--rht-axis applies only with --rht D"},
           {gen + " --rht-bf16", "--rht-bf16 applies only with --rht D"},
           {gen + " --allow-nonfinite", "--allow-nonfinite applies to --input only"},
           {g16 + " --recipe bf16,fp8 --sr-draws 4", "--sr-draws applies only to stochastic rounding"},
           {"run " FP4DRIFT_SOURCE_DIR "/data/configs/sum-fp16-rn.toml --concurrent-runs on", "--concurrent-runs"}})
    require_refused(args, want, out);
  require_refused(g16 + " --save-tensors", "--save-tensors writes into --out FILE");
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"bench quantize --gemm-size 64", "--gemm-size does not apply to bench quantize"},
           {"bench gemm-ref --log2-elements 10", "--log2-elements does not apply to bench gemm-ref"},
           {"bench mlp-cuda --repeat 3", "--repeat does not apply to bench mlp-cuda"},
           {"bench gemm-cuda --dtype f32", "--dtype does not apply to bench gemm-cuda"},
           {"bench quantize-dual-cuda --dtype f16", "--dtype must be bf16 or f32"},
           {"bench quantize --log2-elements 10 --repeat 0", "--repeat must be at least 1, got 0"},
           {"bench quantize --log2-elements 10 --threads 0", "--threads values must be at least 1, got 0"},
           {"bench quantize --log2-elements 10 --cases nvfp4-1x16-rne,nope", "--cases: unknown case 'nope'"},
           {"accumulator --probe-k 8", "--probe-k values must be multiples of 16, at least 32, got 8"},
           {"accumulator --model-check --scale 0", "--scale must be a number in (0, 1000], got 0"},
           {"accumulator --model-check --out check.h5", "--out must name a .json file, got 'check.h5'"},
           {"sweep " FP4DRIFT_SOURCE_DIR "/data/sweeps/bench-sum.toml --dry-run --workers 0", "--workers must be in [1, 4096], got 0"},
           {"sweep " FP4DRIFT_SOURCE_DIR "/data/sweeps/bench-sum.toml --dry-run --backend ''", "--backend must be cpu or cuda"}})
    require_refused(args, want);
  // A sum config's sr_bits under RNE would be recorded in the trace as if SR were on.
  const std::string cfg = write_text(t, "rne-sr8.toml", std::string(kStagnatingSum) + "sr_bits = 8\n");
  require_refused("run " + cfg, "'sum.sr_bits'", out);

  // What does apply is applied and recorded as given.
  {
    const Result r = run(gen + " --rounding sr --sr-bits 8 --seed 5 --stream 2 --rht 16 --rht-signs random --rht-axis 1 --out " + out);
    INFO(r.err);
    REQUIRE(r.status == 0);
    fp4d::h5::File f = fp4d::h5::File::open_read(out);
    fp4d::h5::Group g = f.root().open_group("recipes/custom");
    CHECK(g.get_attr_int64("sr_bits") == 8);
    CHECK(g.get_attr_int64("rht_size") == 16);
    CHECK(g.get_attr_uint64("seed") == 5);
    CHECK(g.get_attr_uint64("stream") == 2);
    fs::remove(out);
  }
  CHECK(run(gen + " --recipe nvfp4-sr --seed 5").status == 0);
  CHECK(run(g16 + " --recipe nvfp4 --sr-draws 2 --seed 3").status == 0);
}

TEST_CASE("generator options belong to their generator: another generator's are refused") {
  TempDir t;
  const std::string out = t.file("o.h5"), x = t.file("x.h5"), w = t.file("w.h5");
  write_tensor(x, std::vector<float>(256, 0.5f), {16, 16});
  write_tensor(w, std::vector<float>(256, 0.25f), {16, 16});
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"quantize --generate normal --nu -1", "--nu is not a parameter of --generate normal"},
           {"quantize --generate normal --outlier-scale 3", "--outlier-scale is not a parameter of --generate normal"},
           {"quantize --generate student-t --outlier-fraction 0.1", "--outlier-fraction is not a parameter of --generate student-t"},
           {"quantize --generate outliers --nu 4", "--nu is not a parameter of --generate outliers"},
           {"quantize --input " + x + ":/x --nu 3", "--nu applies to --generate only"},
           {"quantize --input " + x + ":/x --dist-scale 2", "--dist-scale applies to --generate only"},
           {"quantize --input " + x + ":/x --shape 16x16", "--shape applies to --generate only"},
           {"quantize --input " + x + ":/x --data-seed 4", "--data-seed applies to --generate only"},
           {"gemm --m 16 --n 16 --k 16 --nu 3", "--nu is not a parameter of --generate normal"},
           {"gemm --m 16 --n 16 --k 16 --generate student-t --outlier-scale 3", "--outlier-scale is not a parameter"},
           {"gemm --m 16 --n 16 --k 16 --input-first " + x + ":/x --input-second " + w + ":/x --generate student-t",
            "--generate applies to generated operands, and both come from files"}})
    require_refused(args, want, out);
  CHECK(run("quantize --generate student-t --nu 3 --shape 32x32").status == 0);
  CHECK(run("quantize --generate outliers --outlier-fraction 0.1 --outlier-scale 8 --dist-scale 2 --shape 32x32").status == 0);
  CHECK(run("gemm --m 16 --n 16 --k 16 --recipe bf16 --input-first " + x + ":/x --nu 3 --generate student-t").status == 0);
}

TEST_CASE("seeds outside [0, 2^64 - 1] are refused, not wrapped or clamped") {
  TempDir t;
  const std::string out = t.file("o.h5");
  const std::string q = "quantize --generate normal --shape 16x16 --recipe nvfp4-sr", g = "gemm --m 16 --n 16 --k 16 --recipe nvfp4";
  for (const std::string& cmd : {q + " --data-seed", q + " --seed", q + " --stream", g + " --data-seed", g + " --seed",
                                 std::string("accumulator --data-seed")})
    for (const char* value : {"-1", "18446744073709551616", "99999999999999999999999", "1e3", "0x10", "+5", "''"}) {
      INFO(cmd << " " << value);
      const Result r = run(cmd + " " + value + (cmd.rfind("accumulator", 0) == 0 ? "" : " --out " + out));
      CHECK(r.status == 2);
      CHECK(lines(r.err) == 1);
      CHECK(r.err.find("must be an integer in [0, 18446744073709551615]") != std::string::npos);
      require_no_output(out);
    }
  CHECK(run(q + " --seed=-1").status == 2);
  // The largest seed is a seed, recorded as given.
  const Result r = run(q + " --data-seed 18446744073709551615 --seed 18446744073709551615 --out " + out);
  INFO(r.err);
  REQUIRE(r.status == 0);
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  CHECK(f.root().get_attr_string("source").find("seed=18446744073709551615") != std::string::npos);
  CHECK(f.root().open_group("recipes/nvfp4-sr").get_attr_uint64("seed") == 18446744073709551615ull);
}

TEST_CASE("run: an endless or oversized config file is refused at once, in one line") {
  // /dev/zero used to be read until memory ran out; a NUL in a config left a half-made trace.
  TempDir t;
  const std::string out = t.file("o.h5");
  Result r = run("run /dev/zero --out " + out);
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("larger than the 1 MiB") != std::string::npos);
  require_no_output(out);
  const char nul[] = "workload = \"sum\" # a\0b\n";
  std::ofstream(t.file("nul.toml"), std::ios::binary) << std::string(nul, sizeof nul - 1);
  r = run("run " + t.file("nul.toml") + " --out " + out);
  CHECK(r.status == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("control character") != std::string::npos);
  require_no_output(out);
}

TEST_CASE("--json: one line of valid JSON, keys in order, integers as integers, non-finite values as null") {
  const Result g = run("gemm --m 16 --n 16 --k 16 --recipe nvfp4 --json");
  INFO(g.err);
  REQUIRE(g.status == 0);
  CHECK(lines(g.out) == 1);
  CHECK(g.out.back() == '\n');
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(g.out);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"role", "backend", "m", "n", "k", "recipes"});
  CHECK(j["m"].is_number_integer());
  CHECK(j["k"].get<std::int64_t>() == 16);
  REQUIRE(j["recipes"].size() == 1);
  const auto& rec = j["recipes"][0];
  CHECK(rec["name"] == "nvfp4");
  CHECK(rec["split_exact"].is_boolean());
  CHECK(rec["sr_draws"].is_number_integer());
  CHECK(rec["total"]["rel_frobenius"].is_number_float());
  CHECK(rec["accumulation_bits"].contains("exact_fraction"));

  // The reference off: the gaps and weight errors are NaN, which JSON has no literal for.
  TempDir d;
  std::string cfg = kTinyMlp;
  cfg.insert(cfg.find("compare_every"), "enabled = false\n");
  const Result m = run("run " + write_text(d, "off.toml", cfg) + " --out " + d.file("off.h5") + " --json");
  INFO(m.err);
  REQUIRE(m.status == 0);
  CHECK(lines(m.out) == 1);
  const nlohmann::ordered_json r = nlohmann::ordered_json::parse(m.out);
  CHECK(r["workload"] == "mlp");
  CHECK(r["steps"] == 30);
  CHECK(r["reference_final_loss"].is_null());
  REQUIRE(r["runs"].size() == 2);
  for (const auto& x : r["runs"]) {
    CHECK(x["final_loss"].is_number_float());
    CHECK(x["final_rel_loss_gap"].is_null());
    CHECK(x["final_last_layer_weight_rel_error"].is_null());
    CHECK(x["first_nonfinite_step"] == -1);
  }
}

// OpenMP threads wait passively unless the user chose a policy (the process re-executes itself
// with OMP_WAIT_POLICY=passive), --threads sets the thread count, and both are recorded; the
// trace's numbers are the same bits for any thread count.
TEST_CASE("run --threads: the same trace bits for any thread count; threads wait passively by default") {
  TempDir d;
  const std::string cfg = write_text(d, "t.toml",
                                     "workload = \"lm\"\n[lm]\nsteps = 6\nvocab = 16\nd_model = 32\nheads = 2\nffn = 32\n"
                                     "seq_len = 16\nbatch = 2\npattern = \"MA\"\n[lm.mamba]\nhead_dim = 4\nchunk = 8\n"
                                     "[data]\nzipf_support = 4\n");
  const char* saved = std::getenv("OMP_WAIT_POLICY");
  const std::string saved_value = saved ? saved : "";
  unsetenv("OMP_WAIT_POLICY");
  const Result one = run("run " + cfg + " --threads 1 --out " + d.file("one.h5"));
  const Result two = run("run " + cfg + " --threads 2 --out " + d.file("two.h5"));
  setenv("OMP_WAIT_POLICY", "active", 1);
  const Result told = run("run " + cfg + " --threads 2 --out " + d.file("told.h5"));
  if (saved) setenv("OMP_WAIT_POLICY", saved_value.c_str(), 1);
  else unsetenv("OMP_WAIT_POLICY");
  REQUIRE(one.status == 0);
  REQUIRE(two.status == 0);
  REQUIRE(told.status == 0);
  const auto attrs = [&](const std::string& name) {
    const fp4d::h5::File f = fp4d::h5::File::open_read(d.file(name));
    return std::make_pair(f.root().get_attr_int64("omp_threads"), f.root().get_attr_string("omp_wait_policy"));
  };
  CHECK(attrs("one.h5") == std::make_pair(std::int64_t{1}, std::string("passive")));
  CHECK(attrs("two.h5") == std::make_pair(std::int64_t{2}, std::string("passive")));
  CHECK(attrs("told.h5").second == "active");
  const auto data = [&](const std::string& name) {
    const fp4d::h5::File f = fp4d::h5::File::open_read(d.file(name));
    return fp4d::test::numeric_datasets(f.root());
  };
  fp4d::test::check_same_datasets(data("one.h5"), data("two.h5"));
  const Result bad = run("run " + cfg + " --threads 0 --check");
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--threads") != std::string::npos);
}

TEST_CASE("a misspelt subcommand names the known ones; --steps 0 is refused") {
  const Result typo = run("rn data.toml");
  CHECK(typo.status == 2);
  CHECK(lines(typo.err) == 1);
  CHECK(typo.err.find("unknown subcommand 'rn'") != std::string::npos);
  CHECK(typo.err.find("run, sweep") != std::string::npos);
  const Result zero = run("run " + std::string(FP4DRIFT_SOURCE_DIR) + "/data/configs/lm-quick.toml --steps 0 --check");
  CHECK(zero.status == 2);
  CHECK(lines(zero.err) == 1);
  CHECK(zero.err.find("--steps") != std::string::npos);
}

TEST_CASE("quantize: per-channel and per-block statistics, the generator's outlier mask and the split") {
  TempDir t;
  const std::string out = t.file("q.h5");
  const Result r = run("quantize --generate outliers --shape 64x64 --outlier-fraction 0.05 --preset nvfp4,nvfp4-rht "
                       "--json --out " + out);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(r.out);
  for (const auto& rec : j["recipes"]) {
    INFO(rec["name"]);
    const auto& sp = rec["outlier_split"];
    CHECK(sp["mask_source"] == "generator");
    CHECK(sp["outlier_channels"] == 3);  // round(0.05 * 64)
    CHECK(sp["normal_channels"] == 61);
    // 1x16 blocks along the channels: a 50x channel sets the scale of its block, and the other
    // 15 channels of that block lose most of their resolution.
    CHECK(sp["normal_nmse"].get<double>() > sp["outlier_nmse"].get<double>());
    CHECK(rec["channels"]["nmse_original_basis"].get<double>() > 0);
    CHECK(rec["blocks"]["worst"].size() == 8);
    CHECK(rec["blocks"]["nmse_p50"].get<double>() <= rec["blocks"]["nmse_max"].get<double>());
  }
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  const fp4d::h5::Group st = f.root().open_group("recipes/nvfp4-rht/stats");
  CHECK(st.open_dataset("channel_nmse").dimension_labels() == std::vector<std::string>{"channel"});
  CHECK(st.open_dataset("row_nmse_transformed").dimension_labels() == std::vector<std::string>{"row"});
  CHECK(st.open_dataset("block_nmse").dimension_labels() == std::vector<std::string>{"block_row", "block_col"});
  const std::vector<std::uint8_t> mask = st.read<std::uint8_t>("outlier_mask");
  CHECK(std::count(mask.begin(), mask.end(), 1) == 3);
  CHECK(st.get_attr_string("outlier_mask_source") == "generator");
  CHECK_FALSE(f.root().open_group("recipes/nvfp4/stats").is_dataset("channel_nmse_transformed"));

  // The table says it in one line per recipe.
  const Result table = run("quantize --generate outliers --shape 64x64 --preset nvfp4");
  REQUIRE(table.status == 0);
  CHECK(table.out.find("outlier channels (1 of 64") != std::string::npos);
  CHECK(table.out.find("normal/global") != std::string::npos);
}

TEST_CASE("quantize --outlier-channels: a user's mask for a file's tensor; bad masks are one line, exit 2") {
  TempDir t;
  const std::string in = t.file("x.h5"), out = t.file("q.h5");
  std::vector<float> v(32 * 32);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 13) - 6.0f + ((i % 32) == 4 ? 400.0f : 0.0f);
  write_tensor(in, v, {32, 32});
  const Result ok = run("quantize --input " + in + ":/x --preset nvfp4 --outlier-channels 4,30-31 --json --out " + out);
  INFO(ok.err);
  REQUIRE(ok.status == 0);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(ok.out);
  CHECK(j["recipes"][0]["outlier_split"]["outlier_channels"] == 3);
  CHECK(j["recipes"][0]["outlier_split"]["mask_source"] == "--outlier-channels 4,30-31");
  CHECK(fs::exists(out));
  // Without a mask: no split, the per-channel statistics still.
  const Result none = run("quantize --input " + in + ":/x --preset nvfp4 --json");
  REQUIRE(none.status == 0);
  const nlohmann::ordered_json n = nlohmann::ordered_json::parse(none.out);
  CHECK_FALSE(n["recipes"][0].contains("outlier_split"));
  CHECK(n["recipes"][0]["channels"]["worst_channel"].is_number_integer());
  const std::string out2 = t.file("bad.h5");
  for (const char* bad : {"32", "4,4", "7-5", "x", "1,,2"}) {
    INFO(bad);
    const Result r = run("quantize --input " + in + ":/x --preset nvfp4 --outlier-channels " + std::string(bad) + " --out " + out2);
    CHECK(r.status == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("--outlier-channels") != std::string::npos);
    require_no_output(out2);
  }
  const Result gen = run("quantize --generate outliers --shape 32x32 --outlier-channels 1 --out " + out2);
  CHECK(gen.status == 2);
  CHECK(gen.err.find("records the mask it applied") != std::string::npos);
  require_no_output(out2);
}

TEST_CASE("gemm: per-row and per-column errors, X's outlier channels on K (fprop) and on C's rows (wgrad)") {
  TempDir t;
  const std::string out = t.file("g.h5");
  const Result fp = run("gemm --role fprop --m 32 --n 32 --k 64 --generate outliers --outlier-fraction 0.05 "
                        "--recipe nvfp4 --json --out " + out);
  INFO(fp.err);
  REQUIRE(fp.status == 0);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(fp.out);
  const auto& sp = j["recipes"][0]["outlier_split"];
  CHECK(sp["axis"] == "reduction");
  CHECK(sp["outlier_channels"] == 3);
  CHECK(sp["quantization_from_normal_channels_rel_frobenius"].get<double>() > 0);
  CHECK(j["recipes"][0]["row_rel_frobenius_max"]["total"].get<double>() >=
        j["recipes"][0]["total"]["rel_frobenius"].get<double>());
  fp4d::h5::File f = fp4d::h5::File::open_read(out);
  CHECK(f.root().open_dataset("recipes/nvfp4/row_rel_frobenius").dimension_labels() ==
        std::vector<std::string>{"term", "out_row"});
  CHECK(f.root().open_group("recipes/nvfp4").get_attr_string("outlier_axis") == "reduction");
  const std::vector<std::uint8_t> mask = f.root().read<std::uint8_t>("outlier_mask_X");
  CHECK(mask.size() == 64);
  const Result wg = run("gemm --role wgrad --m 32 --n 32 --k 64 --generate outliers --recipe nvfp4 --json");
  REQUIRE(wg.status == 0);
  const nlohmann::ordered_json w = nlohmann::ordered_json::parse(wg.out);
  CHECK(w["recipes"][0]["outlier_split"]["axis"] == "output_rows");
  CHECK(w["recipes"][0]["outlier_split"]["total_outlier_rows_rel_frobenius"].get<double>() > 0);
  const Result plain = run("gemm --role fprop --m 16 --n 16 --k 32 --recipe bf16 --json");
  REQUIRE(plain.status == 0);
  CHECK_FALSE(nlohmann::ordered_json::parse(plain.out)["recipes"][0].contains("outlier_split"));
}

// The run summary's headline (numerics.md 8g): the loss gap over a stated trailing window, the
// weight error of the layers the recipe quantizes (the edge layers apart), the growth exponent
// over the last factor 2 of steps; the table states both windows.
TEST_CASE("run mlp: the headline reports the quantized layers and states its windows") {
  TempDir d;
  const std::string cfg = write_text(d, "h.toml", kTinyMlp);
  const Result m = run("run " + cfg + " --out " + d.file("h.h5") + " --json");
  INFO(m.err);
  REQUIRE(m.status == 0);
  const nlohmann::ordered_json r = nlohmann::ordered_json::parse(m.out);
  REQUIRE(r["runs"].size() == 2);
  for (const auto& x : r["runs"]) {
    // 30 records: a tenth is 3, the floor of 20 records wins (steps 10..29)
    CHECK(x["rel_loss_gap_window"]["first_step"] == 10);
    CHECK(x["rel_loss_gap_window"]["last_step"] == 29);
    CHECK(x["rel_loss_gap_window"]["records"] == 20);
    CHECK(x["rel_loss_gap"].is_number_float());
    // compares 5, 10, ..., 30: the last window (15, 30] holds 20, 25, 30
    CHECK(x["quantized_growth"]["first_step"] == 20);
    CHECK(x["quantized_growth"]["last_step"] == 30);
    CHECK(x["quantized_growth"]["points"] == 3);
  }
  const auto& fp32 = r["runs"][0];
  const auto& nv = r["runs"][1];
  CHECK(fp32["quantized_layers"] == std::vector<int>{0, 1});  // fp32 keeps no edge layers
  CHECK(fp32["edge_layers"].empty());
  CHECK(nv["quantized_layers"] == std::vector<int>{1});
  CHECK(nv["edge_layers"] == std::vector<int>{0});
  // one quantized layer: the aggregate is that layer's error
  const double agg = nv["quantized_weight_rel_error"].get<double>(), one = nv["quantized_layer_weight_rel_error"][0].get<double>();
  CHECK(std::abs(agg - one) <= 1e-15 * one);
  CHECK(nv["edge_layer_weight_rel_error"].size() == 1);
  CHECK(nv["quantized_weight_rel_error"].get<double>() > 100 * fp32["quantized_weight_rel_error"].get<double>());

  const Result t = run("run " + cfg + " --out " + d.file("t.h5"));
  REQUIRE(t.status == 0);
  CHECK(t.out.find("mean of (L - L_ref) / L_ref over steps 10-29") != std::string::npos);
  CHECK(t.out.find("over the compares of steps 20-30, 95% t interval") != std::string::npos);
  CHECK(t.out.find("quantized 1 ") != std::string::npos);
  CHECK(t.out.find("edge 0 ") != std::string::npos);
}
