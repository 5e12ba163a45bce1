// The config reader (util/config.hpp): the TOML subset it accepts, the values it returns, and
// every way a config can be wrong, each refused with the file, line and key in the message.
#include <filesystem>
#include <string>

#include "support/catch.hpp"
#include "support/config_error.hpp"
#include "util/config.hpp"

using fp4d::Config;

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
      {"x = 'single'", "literal 'strings'"},
      {"x = {a = 1}", "inline tables"},
      {"x = [[1]]", "nested arrays"},
      {"x = [1, \"a\"]", "mixes value types"},
      {"x = \"open", "unterminated string"},
      {"a.b = 1", "dotted keys"},
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
