// Sweep expansion (src/sweep/expand.hpp): grid x list products in a stated order, ids stable
// across expansions and independent of how a value is spelled, overrides replacing or adding
// keys in the config text, and every malformed sweep refused before anything runs; the index's
// per-recipe rows carrying each run's summary headline.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/config_error.hpp"
#include "sweep/expand.hpp"
#include "sweep/index.hpp"
#include "sweep/state.hpp"
#include "sweep/toml_text.hpp"
#include "trace/h5.hpp"
#include "util/config.hpp"

using fp4d::Config;
namespace sw = fp4d::sweep;

using fp4d_test::config_error_of;
using fp4d_test::contains;

namespace {
const char* kBase = R"(# a sum config
workload = "sum"

[sum]
terms = "constant"
c = 1.0              # the addend
n = 1024
format = "fp16"
rounding = "sr"
runs = 2
seed = 1
)";

sw::Sweep expand(const std::string& text) { return sw::expand_sweep(text, "s.toml", kBase, "base.toml"); }
}  // namespace

TEST_CASE("sweep: a grid expands to the cartesian product, the last axis fastest", "[sweep]") {
  const sw::Sweep s = expand("base = \"b\"\n[grid.sum]\nseed = [1, 2, 3]\nn = [16, 32]\n");
  REQUIRE(s.runs.size() == 6);
  REQUIRE(s.axes == std::vector<std::string>{"sum.seed", "sum.n"});
  CHECK(s.runs[0].label == "sum.seed=1 sum.n=16");
  CHECK(s.runs[1].label == "sum.seed=1 sum.n=32");
  CHECK(s.runs[5].label == "sum.seed=3 sum.n=32");
  for (const sw::SweepRun& r : s.runs) CHECK(r.workload == "sum");
  // The materialised config carries the values, and reads back through Config.
  Config c = Config::parse(s.runs[3].config_text);
  CHECK(c.get_int("sum.seed") == 2);
  CHECK(c.get_int("sum.n") == 32);
  CHECK(c.get_string("sum.format") == "fp16");  // untouched keys stay
  CHECK(contains(s.runs[3].config_text, "# a sum config"));  // and so do the comments
  CHECK(s.workers == 1);
  CHECK(s.backend == "cpu");
}

TEST_CASE("sweep: list entries times grid points, entries in file order", "[sweep]") {
  const sw::Sweep s = expand(
      "base = \"b\"\nworkers = 3\n[list.small.sum]\nn = 16\nformat = \"bf16\"\n[list.big.sum]\nn = 4096\n"
      "[grid.sum]\nseed = [7, 8]\n");
  REQUIRE(s.runs.size() == 4);
  CHECK(s.workers == 3);
  CHECK(s.runs[0].label == "small: sum.n=16 sum.format=\"bf16\" sum.seed=7");
  CHECK(s.runs[1].label == "small: sum.n=16 sum.format=\"bf16\" sum.seed=8");
  CHECK(s.runs[2].label == "big: sum.n=4096 sum.seed=7");
  Config c = Config::parse(s.runs[1].config_text);
  CHECK(c.get_string("sum.format") == "bf16");
  CHECK(c.get_int("sum.seed") == 8);
  Config d = Config::parse(s.runs[2].config_text);
  CHECK(d.get_string("sum.format") == "fp16");  // the base value where the entry sets none
  // An entry with no keys is the base config itself (a baseline beside the variants).
  const sw::Sweep b = expand("base = \"b\"\n[list.base]\n[list.big.sum]\nn = 4096\n");
  REQUIRE(b.runs.size() == 2);
  CHECK(b.runs[0].label == "base:");
  CHECK(b.runs[0].config_text == std::string(kBase));
  CHECK(b.runs[1].label == "big: sum.n=4096");
}

TEST_CASE("sweep: ids are stable and follow the values, not their spelling", "[sweep]") {
  const sw::Sweep a = expand("base = \"b\"\n[grid.sum]\nc = [0.5, 2.0]\n");
  const sw::Sweep b = expand("base = \"b\"   # the same sweep, other spelling\n[grid.sum]\nc = [5e-1, 2.0]\n");
  REQUIRE(a.runs.size() == 2);
  CHECK(a.runs[0].id == b.runs[0].id);
  CHECK(a.runs[1].id == b.runs[1].id);
  CHECK(a.runs[0].id != a.runs[1].id);
  CHECK(a.runs[0].id.substr(0, 5) == "0000-");
  CHECK(a.runs[1].id.substr(0, 5) == "0001-");
  // Another value at the same index is another run.
  const sw::Sweep c = expand("base = \"b\"\n[grid.sum]\nc = [0.25, 2.0]\n");
  CHECK(c.runs[0].id != a.runs[0].id);
  // The hash is FNV-1a 64 (a published test vector: "a" -> af63dc4c8601ec8c).
  CHECK(sw::fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(sw::fnv1a64("") == 14695981039346656037ull);
}

TEST_CASE("sweep: overrides replace a value or add the key to its section", "[sweep]") {
  const std::string t = sw::apply_overrides(kBase, {{"sum.n", "64"}, {"sum.sr_bits", "8"}, {"trace.every", "2"}});
  Config c = Config::parse(t);
  CHECK(c.get_int("sum.n") == 64);
  CHECK(c.get_int("sum.sr_bits") == 8);
  CHECK(c.get_int("trace.every") == 2);
  // A replaced value loses its old comment (it would describe the old value), keeps the key.
  const std::string u = sw::apply_overrides(kBase, {{"sum.c", "3.0"}});
  CHECK(contains(u, "c = 3.0   # set by the sweep"));
  CHECK(!contains(u, "the addend"));
  // A key added to a section that is not the last goes inside it, before the next header.
  const std::string w = sw::apply_overrides("[a]\nx = 1\n\n[b]\ny = 2\n", {{"a.z", "3"}, {"b.w", "4"}});
  CHECK(w == "[a]\nx = 1\nz = 3   # added by the sweep\n\n[b]\ny = 2\nw = 4   # added by the sweep\n");
  // Top-level keys go before the first section.
  const std::string v = sw::apply_overrides("[a]\nx = 1\n", {{"top", "\"y\""}});
  CHECK(Config::parse(v).get_string("top") == "y");
  CHECK(v.find("top") < v.find("[a]"));
}

TEST_CASE("sweep: an unknown key or bad value in any run is refused before anything runs", "[sweep]") {
  std::string e = config_error_of([] { expand("base = \"b\"\n[grid.sum]\nnn = [1, 2]\n"); });
  CHECK(contains(e, "unknown config key 'sum.nn'"));
  CHECK(contains(e, "run 0000-"));
  e = config_error_of([] { expand("base = \"b\"\n[grid.sum]\nformat = [\"fp16\", \"fp5\"]\n"); });
  CHECK(contains(e, "run 0001-"));  // the second run is the bad one
  e = config_error_of([] { expand("base = \"b\"\nworkerz = 2\n[grid.sum]\nn = [1]\n"); });
  CHECK(contains(e, "unknown config key 'workerz'"));
  e = config_error_of([] { expand("base = \"b\"\n[grid.sum]\nn = 16\n"); });
  CHECK(contains(e, "must be an array"));
  e = config_error_of([] { expand("base = \"b\"\n[grid.sum]\nn = []\n"); });
  CHECK(contains(e, "has no values"));
  e = config_error_of([] { expand("base = \"b\"\n"); });
  CHECK(contains(e, "no runs"));
  e = config_error_of([] { expand("base = \"b\"\n[runs.sum]\nn = [1]\n"); });
  CHECK(contains(e, "unknown section [runs.sum]"));
  e = config_error_of([] { expand("base = \"b\"\nworkers = 0\n[grid.sum]\nn = [1]\n"); });
  CHECK(contains(e, "workers"));
  e = config_error_of([] { expand("base = \"b\"\n[list.a.sum]\nn = 8\n[grid.sum]\nn = [1]\n"); });
  CHECK(contains(e, "both a grid axis"));
}

TEST_CASE("sweep: duplicate runs are refused, whatever the spelling", "[sweep]") {
  std::string e = config_error_of([] { expand("base = \"b\"\n[grid.sum]\nn = [16, 32, 16]\n"); });
  CHECK(contains(e, "runs 0 (sum.n=16) and 2 (sum.n=16) are the same run"));
  e = config_error_of([] { expand("base = \"b\"\n[grid.sum]\nc = [1.0, 1e0]\n"); });
  CHECK(contains(e, "are the same run"));
  e = config_error_of([] { expand("base = \"b\"\n[list.a.sum]\nn = 1_024\n[list.b.sum]\nn = 1024\n"); });
  CHECK(contains(e, "are the same run"));
  // 2 and 2.0: one run for a float key (Config::get_double reads both as 2.0).
  e = config_error_of([] { expand("base = \"b\"\n[list.a.sum]\nc = 2\n[list.b.sum]\nc = 2.0\n"); });
  CHECK(contains(e, "runs 0 (a: sum.c=2) and 1 (b: sum.c=2.0) are the same run"));
  // 2^53 + 1 and 2^53 are different integers (no detour through double).
  CHECK(expand("base = \"b\"\n[grid.sum]\nseed = [9007199254740993, 9007199254740992]\n").runs.size() == 2);
}

TEST_CASE("sweep: value texts, arrays and records", "[sweep]") {
  CHECK(sw::split_array("[1, \"a,b\", \"q\\\"\" ,]") == std::vector<std::string>{"1", "\"a,b\"", "\"q\\\"\""});
  CHECK(sw::canonical_value("1_000") == sw::canonical_value("1000"));
  CHECK(sw::canonical_value("[0.5, 1.5]") == sw::canonical_value("[5e-1, 15e-1]"));
  CHECK(sw::canonical_value("2") != sw::canonical_value("\"2\""));
  CHECK(sw::canonical_value("\"x\"") != sw::canonical_value("\"y\""));
  const std::vector<sw::TomlLine> lines = sw::scan_toml("a = \"x # y\"  # c\n[s]\nb = [1, 2] # d\n");
  REQUIRE(lines.size() == 3);
  CHECK(sw::value_text("a = \"x # y\"  # c\n[s]\nb = [1, 2] # d\n", lines[0]) == "\"x # y\"");
  CHECK(lines[2].full_key == "s.b");
  sw::RunRecord r;
  r.status = "failed";
  r.exit_code = 2;
  r.wall_s = 0.1;
  r.attempts = 3;
  r.error = "fp4drift: error: \"q\"\tbad\\";
  const sw::RunRecord back = sw::parse_record(sw::record_text(r), "rec");
  CHECK(back.status == r.status);
  CHECK(back.exit_code == 2);
  CHECK(back.wall_s == 0.1);  // %.17g round-trips a double exactly
  CHECK(back.attempts == 3);
  CHECK(back.error == r.error);
}

TEST_CASE("sweep: every shipped sweep file in data/sweeps expands and validates", "[sweep]") {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(FP4DRIFT_SOURCE_DIR "/data/sweeps")) {
    if (e.path().extension() != ".toml") continue;
    INFO(e.path().string());
    const sw::Sweep s = sw::load_sweep(e.path().string());
    CHECK(!s.runs.empty());
    std::set<std::string> ids;
    for (const sw::SweepRun& r : s.runs) ids.insert(r.id);
    CHECK(ids.size() == s.runs.size());
    ++files;
  }
  CHECK(files >= 3);
}

TEST_CASE("sweep: config text in full TOML - multi-line arrays, literal strings, dotted keys", "[sweep]") {
  const std::string t =
      "a = 'x # y'  # c\nlr = [\n  1,  # one\n  2,\n]  # tail\n[ grid . \"sum\" ]\nb.c = \"\"\"p\n[q]\nr = 1\"\"\"\nz = 1\n";
  REQUIRE_NOTHROW(Config::parse(t));
  const std::vector<sw::TomlLine> lines = sw::scan_toml(t);
  REQUIRE(lines.size() == 5);
  CHECK(sw::value_text(t, lines[0]) == "'x # y'");
  CHECK(lines[1].full_key == "lr");
  CHECK(sw::value_text(t, lines[1]) == "[\n  1,  # one\n  2,\n]");
  CHECK(t.substr(lines[1].end, 9) == "\n[ grid .");  // the statement ends with its last line
  CHECK(sw::split_array(sw::value_text(t, lines[1])) == std::vector<std::string>{"1", "2"});
  CHECK(lines[2].kind == sw::TomlLine::Section);
  CHECK(lines[2].section == "grid.sum");
  CHECK(lines[2].line == 6);
  CHECK(lines[3].full_key == "grid.sum.b.c");  // the "[q]" inside the string is no header
  CHECK(lines[3].section == "grid.sum.b");
  CHECK(lines[3].key == "c");
  CHECK(lines[4].full_key == "grid.sum.z");
  CHECK(lines[4].line == 10);

  // A grid over several lines, with dotted keys and literal strings; 'fp16' and "fp16" are one value.
  const sw::Sweep s = expand("base = \"b\"\n[grid]\nsum.seed = [\n  1,  # first\n  2,\n]\nsum.format = ['fp16', \"bf16\"]\n");
  REQUIRE(s.runs.size() == 4);
  CHECK(s.runs[0].label == "sum.seed=1 sum.format='fp16'");
  CHECK(Config::parse(s.runs[3].config_text).get_string("sum.format") == "bf16");
  CHECK(contains(config_error_of([] { expand("base = \"b\"\ngrid.sum.format = ['fp16', \"fp16\"]\n"); }),
                 "are the same run"));
  // A multi-line value in the base is replaced whole, comments inside it included.
  CHECK(sw::apply_overrides("[s]\nv = [\n 1, # one\n 2,\n]  # old\nw = 1\n", {{"s.v", "[3]"}}) ==
        "[s]\nv = [3]   # set by the sweep\nw = 1\n");
}

TEST_CASE("sweep: what cannot be edited line by line is refused, not mangled", "[sweep]") {
  std::string e = config_error_of([] { sw::apply_overrides("m = {a = 1}\n", {{"m.a", "2"}}); });
  CHECK(contains(e, "line 1: 'm' is an inline table"));
  CHECK(contains(e, "[m] section"));
  e = config_error_of([] { expand("base = \"b\"\n[list.a]\nsum = {n = 8}\n"); });
  CHECK(contains(e, "'list.a.sum' is an inline table"));
  // Records stay TOML whatever an error message holds: control bytes and invalid UTF-8.
  const std::string odd = "a\x01\x7f\xff \xc3\xa9\n\"";
  CHECK(Config::parse("v = " + sw::toml_quote(odd)).get_string("v") == "a\x01\x7f\xef\xbf\xbd \xc3\xa9\n\"");
}

namespace {
// A trace with what read_metrics reads of an mlp run: two recipes, "new" with the run summary
// attributes, "old" without them (a trace written before they existed).
void write_mlp_trace(const std::string& path) {
  fp4d::h5::File f = fp4d::h5::File::create(path);
  fp4d::h5::Group root = f.root();
  fp4d::h5::Group mlp = root.create_group("mlp");
  mlp.set_attr("recipes", "new,old");
  mlp.create_group("reference").write("loss", std::vector<double>{2.0, 1.5, 1.25});
  fp4d::h5::Group runs = mlp.create_group("runs");
  for (const char* name : {"new", "old"}) {
    fp4d::h5::Group g = runs.create_group(name);
    g.write("loss", std::vector<double>{2.2, 1.6, 1.3});
    g.write("rel_loss_gap", std::vector<double>{0.1, 1.0 / 15, 0.04});
    // two compares x three layers: the last layer's last error is 0.03
    g.write("weight_rel_error", std::vector<double>{0.001, 0.002, 0.003, 0.01, 0.02, 0.03}, fp4d::h5::Dims{2, 3});
    g.set_attr("weight_error_growth_exponent", 0.75);
    g.set_attr("first_nonfinite_step", std::int64_t{-1});
  }
  fp4d::h5::Group g = root.open_group("mlp/runs/new");
  g.set_attr("rel_loss_gap_window_mean", 0.0688);
  g.set_attr("gap_window_first_step", std::int64_t{0});
  g.set_attr("gap_window_last_step", std::int64_t{2});
  g.set_attr("quantized_weight_rel_error", 0.0213);
  g.set_attr("quantized_growth_exponent", 0.61);
  g.set_attr("quantized_growth_ci", std::vector<double>{0.52, 0.70});
  g.set_attr("quantized_growth_window", std::vector<std::int64_t>{110, 200});
}
}  // namespace

TEST_CASE("sweep: the index records each run's summary headline, and NaN where a trace predates it", "[sweep]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fp4d_sweep_headline_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const sw::Sweep s = expand("base = \"b\"\n[grid.sum]\nseed = [1]\n");
  const sw::RunPaths p(dir.string(), s.runs.at(0).id);
  std::filesystem::create_directories(p.dir);
  write_mlp_trace(p.trace);

  const sw::RunMetrics m = sw::read_metrics(p.trace);
  REQUIRE(m.recipes.size() == 2);
  const sw::RecipeMetrics& n = m.recipes[0];
  const sw::RecipeMetrics& o = m.recipes[1];
  // The headline is the trace's attributes, copied (not recomputed from the arrays).
  CHECK(n.rel_loss_gap_window_mean == 0.0688);
  CHECK(n.gap_window_first_step == 0);
  CHECK(n.gap_window_last_step == 2);
  CHECK(n.quantized_weight_rel_error == 0.0213);
  CHECK(n.quantized_growth_exponent == 0.61);
  CHECK(n.quantized_growth_ci_low == 0.52);
  CHECK(n.quantized_growth_ci_high == 0.70);
  CHECK(n.quantized_growth_first_step == 110);
  CHECK(n.quantized_growth_last_step == 200);
  // The older fields keep their meaning: the last record, the last layer, the whole-run fit.
  for (const sw::RecipeMetrics* r : {&n, &o}) {
    CHECK(r->final_rel_loss_gap == 0.04);
    CHECK(r->final_weight_rel_error == 0.03);
    CHECK(r->growth_exponent == 0.75);
  }
  // A trace without the summary attributes: unknown, not a stand-in value.
  CHECK(std::isnan(o.rel_loss_gap_window_mean));
  CHECK(o.gap_window_first_step == -1);
  CHECK(std::isnan(o.quantized_weight_rel_error));
  CHECK(std::isnan(o.quantized_growth_exponent));
  CHECK(std::isnan(o.quantized_growth_ci_low));
  CHECK(o.quantized_growth_last_step == -1);

  sw::RunRecord rec;
  rec.status = "complete";
  sw::write_index(dir.string(), s, {rec}, {m}, sw::IndexInfo{"complete", "local", 1, "fp4drift sweep s.toml"});
  {
    const fp4d::h5::File f = fp4d::h5::File::open_read((dir / "sweep.h5").string());
    const fp4d::h5::Group r = f.root().open_group("summary_recipes");
    const std::vector<double> gap = r.read<double>("rel_loss_gap_window_mean");
    const std::vector<double> werr = r.read<double>("quantized_weight_rel_error");
    const std::vector<double> growth = r.read<double>("quantized_growth_exponent");
    const std::vector<double> lo = r.read<double>("quantized_growth_ci_low");
    const std::vector<double> hi = r.read<double>("quantized_growth_ci_high");
    const std::vector<std::int64_t> gfirst = r.read<std::int64_t>("gap_window_first_step");
    const std::vector<std::int64_t> glast = r.read<std::int64_t>("gap_window_last_step");
    const std::vector<std::int64_t> wfirst = r.read<std::int64_t>("quantized_growth_first_step");
    const std::vector<std::int64_t> wlast = r.read<std::int64_t>("quantized_growth_last_step");
    const std::vector<double> last = r.read<double>("final_rel_loss_gap");
    REQUIRE(gap.size() == 2);
    CHECK(gap[0] == 0.0688);
    CHECK(werr[0] == 0.0213);
    CHECK(growth[0] == 0.61);
    CHECK((lo[0] == 0.52 && hi[0] == 0.70));
    CHECK((gfirst[0] == 0 && glast[0] == 2 && wfirst[0] == 110 && wlast[0] == 200));
    CHECK((std::isnan(gap[1]) && std::isnan(werr[1]) && std::isnan(growth[1]) && std::isnan(lo[1])));
    CHECK((gfirst[1] == -1 && wlast[1] == -1));
    CHECK((last[0] == 0.04 && last[1] == 0.04));
  }
  std::filesystem::remove_all(dir);
}
