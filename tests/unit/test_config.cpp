// The config reader (util/config.hpp): the TOML it accepts, the values it returns, and every
// way a config can be wrong, each refused with the file, line and key in a one-line message.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/catch.hpp"
#include "support/config_error.hpp"
#include "util/config.hpp"

using fp4d::Config;
using namespace std::string_literals;

using fp4d_test::config_error_of;
using fp4d_test::contains;

TEST_CASE("config: values of every accepted kind") {
  Config c = Config::parse(R"(# a comment
workload = "sum"   # trailing comment
count = 1_000
negative = -42
ratio = 2.5e-3
flag = true
list = ["a", "b",]
empty = []

[sum.inner]
name = "quote \" and \\ backslash"
x = 3
)",
                           "t.toml");
  CHECK(c.get_string("workload") == "sum");
  CHECK(c.get_int("count") == 1000);
  CHECK(c.get_int("negative") == -42);
  CHECK(c.get_double("ratio") == 2.5e-3);
  CHECK(c.get_bool("flag", false));
  CHECK(c.get_strings("list", {}) == std::vector<std::string>{"a", "b"});
  CHECK(c.get_strings("empty", {"x"}).empty());
  CHECK(c.get_string("sum.inner.name") == "quote \" and \\ backslash");
  CHECK(c.get_double("sum.inner.x") == 3.0);  // an integer where a float is asked for
  CHECK(c.get_int("absent", 7) == 7);
  CHECK(c.get_strings("absent2", {"d"}) == std::vector<std::string>{"d"});
  CHECK(c.get_ints("count", {}) == std::vector<std::int64_t>{1000});
  CHECK(c.get_ints("absent3", {1, 2}) == std::vector<std::int64_t>{1, 2});
  CHECK(contains(config_error_of([&] { c.get_ints("list", {}); }), "must be an integer or an array of integers"));
  CHECK_NOTHROW(c.finish());
}

TEST_CASE("config: an unknown key is an error naming it, its line and the known keys") {
  Config c = Config::parse("workload = \"sum\"\n[sum]\nn = 4\nnn = 5\n", "t.toml");
  CHECK(c.get_string("workload") == "sum");
  CHECK(c.get_int("sum.n") == 4);
  const std::string e = config_error_of([&] { c.finish(); });
  CHECK(contains(e, "t.toml:4"));
  CHECK(contains(e, "unknown config key 'sum.nn'"));
  CHECK(contains(e, "sum.n"));
}

TEST_CASE("config: wrong types, missing keys and range checks name the key") {
  Config c = Config::parse("a = \"x\"\nb = 1.5\nc = [1, 2]\n", "t.toml");
  CHECK(contains(config_error_of([&] { c.get_int("a"); }), "t.toml:1: 'a' must be an integer, got a string"));
  CHECK(contains(config_error_of([&] { c.get_int("b"); }), "'b' must be an integer, got a float"));
  CHECK(contains(config_error_of([&] { c.get_double("c"); }), "'c' must be a number, not an array"));
  CHECK(contains(config_error_of([&] { c.get_string("missing"); }), "missing key 'missing'"));
  CHECK(contains(config_error_of([&] { c.require(false, "b", "must be below 1"); }), "t.toml:2: 'b': must be below 1"));
  CHECK(contains(config_error_of([&] { c.get_bool("a", false); }), "must be true or false"));
}

TEST_CASE("config: a misspelled key is named in the error, required or not") {
  // Required key misspelled: the missing-key error points at the unread near miss.
  Config c = Config::parse("[mlp]\nwidht = 64\ndepth = 2\n", "t.toml");
  CHECK(c.get_int("mlp.depth") == 2);
  const std::string e = config_error_of([&] { c.get_int("mlp.width"); });
  CHECK(contains(e, "missing key 'mlp.width' (did you mean 'mlp.widht' at line 2?)"));
  // A key already read is not offered (depth is two edits from 'mlp.deptx' but was read).
  Config d = Config::parse("[mlp]\ndepth = 2\n", "t.toml");
  CHECK(d.get_int("mlp.depth") == 2);
  const std::string e2 = config_error_of([&] { d.get_int("mlp.deptx"); });
  CHECK(contains(e2, "missing key 'mlp.deptx'"));
  CHECK(!contains(e2, "did you mean"));
  // Nothing near (more than two edits): no hint.
  Config f = Config::parse("[mlp]\nlearning = 1\n", "t.toml");
  CHECK(!contains(config_error_of([&] { f.get_int("mlp.width"); }), "did you mean"));
  // Optional key misspelled: finish() suggests the key that was asked for.
  Config g = Config::parse("[mlp]\nsede = 3\n", "t.toml");
  CHECK(g.get_int("mlp.seed", 1) == 1);
  CHECK(contains(config_error_of([&] { g.finish(); }), "unknown config key 'mlp.sede' (did you mean 'mlp.seed'?)"));
}

TEST_CASE("config: malformed files are refused with the line") {
  const std::pair<const char*, const char*> bad[] = {
      {"x = [[1]]", "nested arrays"},
      {"x = [1, \"a\"]", "mixes value types"},
      {"x = \"open", "unterminated string"},
      {"x = 1\nx = 2", "appears twice"},
      {"[s]\n[s]", "appears twice"},
      {"[[t]]", "arrays of tables"},
      {"x = nan", "inf and nan are not accepted"},
      {"x = -inf", "inf and nan are not accepted"},
      {"x = 1.5.2", "not a number"},
      {"x = 1e999", "out of range"},
      {"x = 99999999999999999999", "out of range"},
      {"x = 1__0", "misplaced '_'"},
      {"x = yes", "not a value"},
      {"x = 1 2", "text after the value"},
      {"just words", "expected 'key = value'"},
      {"x = \"a\\q\"", "unsupported escape"},
      {"[s] x = 1", "text after a section header"},
      {"x =", "missing value"},
  };
  for (const auto& [text, want] : bad) {
    INFO(text);
    const std::string e = config_error_of([&] { Config::parse(text, "bad.toml"); });
    CHECK(contains(e, want));
    CHECK(contains(e, "bad.toml:"));
  }
  CHECK(contains(config_error_of([] { Config::load("/nonexistent/x.toml"); }), "cannot read config file"));
}

TEST_CASE("config: a directory given as the config file is refused as such") {
  // An ifstream opens a directory and reads nothing, so it used to parse as an empty config
  // and fail later with "missing key 'workload'", which points the user at the wrong problem.
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string e = config_error_of([&] { Config::load(dir); });
  CHECK(contains(e, dir));
  CHECK(contains(e, "is a directory"));
}

namespace {
bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos && s.find('\r') == std::string::npos; }
}  // namespace

TEST_CASE("config: text that is not TOML is refused, in one line naming the place") {
  // Each of these was accepted by the subset parser, and then tomllib refused the trace's
  // stored config (or, for the NUL, the trace was left half made).
  const std::pair<std::string, const char*> bad[] = {
      {"[]", "bad.toml:1:"},
      {"x = .5", "not a number"},
      {"x = 5.", "not a number"},
      {"x = 007", "leading zeroes"},
      {"# a\x01b\nx = 1", "control character"},
      {"# a\0b\nx = 1"s, "control character"},
      {"x = \"\xff\"", "not valid UTF-8"},
      {"x = 1\n\n[s]\ny = \"a\x01\"", "bad.toml:4:"},
  };
  for (const auto& [text, want] : bad) {
    INFO(text);
    const std::string e = config_error_of([&] { Config::parse(text, "bad.toml"); });
    CHECK(contains(e, want));
    CHECK(contains(e, "bad.toml:"));
    CHECK(one_line(e));
  }
  // The offending line is quoted with its control bytes escaped.
  CHECK(contains(config_error_of([] { Config::parse("# a\0b\nx = 1"s, "bad.toml"); }), "in '# a\\x00b'"));
}

TEST_CASE("config: full TOML is read, tables flattened to dotted keys") {
  Config c = Config::parse(R"(x = 'single'   # a literal string: no escapes
path = 'C:\dir\file'
m = {a = 1, b = "x"}
deep = {p = {q = 2.5}}
a.b = 1
lr = [
  0.01,   # comments inside an array
  0.02,
]
doc = """
two
lines"""
hex = 0x10

[s]
t.u = true
)",
                           "t.toml");
  CHECK(c.get_string("x") == "single");
  CHECK(c.get_string("path") == "C:\\dir\\file");
  CHECK(c.get_int("m.a") == 1);
  CHECK(c.get_string("m.b") == "x");
  CHECK(c.get_double("deep.p.q") == 2.5);
  CHECK(c.get_int("a.b") == 1);
  CHECK(!c.has("m"));  // a table is not a value
  CHECK(c.get_string("doc") == "two\nlines");
  CHECK(c.get_int("hex") == 16);
  CHECK(c.get_bool("s.t.u", false));
  CHECK(contains(config_error_of([&] { c.finish(); }), "t.toml:6: unknown config key 'lr'"));  // the key's line
  CHECK(contains(config_error_of([&] { c.get_int("lr"); }), "t.toml:6: 'lr' must be an integer, not an array"));
  CHECK_NOTHROW(c.finish());
  Config d = Config::parse("lr = [\n  1,\n  2,\n]\n", "t.toml");
  CHECK(d.get_ints("lr", {}) == std::vector<std::int64_t>{1, 2});
  CHECK_NOTHROW(d.finish());
}

TEST_CASE("config: what the getters cannot represent is refused with the line") {
  const std::pair<const char*, const char*> bad[] = {
      {"x = 1\nd = 1979-05-27", "bad.toml:2: 'd': dates and times are not supported"},
      {"t = 07:32:00", "dates and times are not supported"},
      {"t = 1979-05-27T07:32:00Z", "dates and times are not supported"},
      {"x = [1, 2.5]", "'x': an array mixes value types (an integer and a float)"},
      {"x = [[1], [2]]", "nested arrays are not supported"},
      {"x = [{a = 1}]", "arrays of tables are not supported"},
      {"\"a.b\" = 1", "is not a bare key"},
      {"m = {\"k y\" = 1}", "is not a bare key"},
      {"x = nan", "inf and nan are not accepted"},
      {"[s]\nx = +inf", "bad.toml:2: 's.x': inf and nan are not accepted"},
  };
  for (const auto& [text, want] : bad) {
    INFO(text);
    const std::string e = config_error_of([&] { Config::parse(text, "bad.toml"); });
    CHECK(contains(e, want));
    CHECK(one_line(e));
  }
  // Of two problems the first in the file is reported, whatever the order of the keys.
  CHECK(contains(config_error_of([] { Config::parse("b = nan\na = 1979-05-27", "bad.toml"); }), "bad.toml:1: 'b'"));
}

TEST_CASE("config: files over the size cap are refused, and reading is bounded") {
  // A 2 MiB file of valid TOML (comment lines): refused for its size, not parsed.
  const std::string big = std::string(2u << 20, '#').replace(0, 0, "x = 1\n");
  CHECK(contains(config_error_of([&] { Config::parse(big, "big.toml"); }), "more than the 1 MiB"));
  const std::filesystem::path p = std::filesystem::temp_directory_path() / "fp4d_test_config_big.toml";
  {
    std::ofstream f(p, std::ios::binary);
    f << big;
  }
  const std::string e = config_error_of([&] { Config::load(p.string()); });
  std::filesystem::remove(p);
  CHECK(contains(e, "is larger than the 1 MiB"));
  CHECK(contains(e, "fp4d_test_config_big.toml"));
  CHECK(one_line(e));
  // A file of exactly the cap still loads (the check is not off by one).
  CHECK(fp4d::kMaxConfigBytes == (1u << 20));
  CHECK_NOTHROW(Config::parse("x = 1\n" + std::string(fp4d::kMaxConfigBytes - 6, '#'), "cap.toml"));
  // An endless source: read up to the cap, then refused (it used to be read forever).
  const auto t0 = std::chrono::steady_clock::now();
  const std::string z = config_error_of([] { Config::load("/dev/zero"); });
  CHECK(contains(z, "'/dev/zero' is larger than the 1 MiB"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("config: values in messages are escaped and shortened to one line") {
  Config c = Config::parse("x = \"a\\nb\\u0001c\"\nlong = \"" + std::string(200, 'v') + "\"\nf = 1.5\n", "t.toml");
  const std::string e = config_error_of([&] { c.get_int("x"); });
  CHECK(contains(e, "t.toml:1: 'x' must be an integer, got a string 'a\\x0Ab\\x01c'"));
  CHECK(one_line(e));
  const std::string l = config_error_of([&] { c.get_int("long"); });
  CHECK(contains(l, "'" + std::string(60, 'v') + "...'"));
  CHECK(!contains(l, std::string(61, 'v')));
  CHECK(contains(config_error_of([&] { c.get_string("f"); }), "got a float 1.5"));
  // require() keeps a caller's message on one line too.
  const std::string r = config_error_of([&] { c.require(false, "x", "bad value 'a\nb'"); });
  CHECK(contains(r, "bad value 'a\\x0Ab'"));
  CHECK(one_line(r));
  CHECK(fp4d::quote_for_message("it's a\\b\t") == "it\\'s a\\\\b\\x09");
  CHECK(fp4d::quote_for_message(std::string(10, 'x'), 4) == "xxxx...");
  CHECK(fp4d::quote_for_message("\x01\x02", 5) == "\\x01...");  // an escape is never split
}
