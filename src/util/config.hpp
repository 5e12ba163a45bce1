// Experiment configuration files: a strict subset of TOML (https://toml.io/en/v1.0.0), so
// that Python reads the same files with tomllib and the trace can carry the text verbatim.
//
// Accepted: `# comments`, `[section]` and `[section.sub]` headers, `key = value` with bare
// keys (A-Z a-z 0-9 _ -), values: "basic strings" (escapes \" \\ \n \t), integers
// (decimal, optional sign and _ separators), floats (decimal with . or exponent; inf/nan are
// refused: a config never needs them), true/false, and one-line arrays of those [1, 2, 3].
// Anything else (inline tables, multi-line strings, dates, dotted keys, duplicate keys or
// sections) is an error naming the line.
//
// Strictness is the point: every key a program reads is taken with one of the get_* calls,
// and finish() throws for every key that nobody read ("unknown config key 'sum.nn' at line
// 7 (known keys: ...)"), so a typo never silently falls back to a default.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace fp4d {

// Raised for every problem in a config file; the message names the file, line and key.
struct ConfigError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class Config {
 public:
  using Scalar = std::variant<std::string, std::int64_t, double, bool>;
  struct Value {
    std::vector<Scalar> items;  // one item for a scalar
    bool is_array = false;
    int line = 0;
  };

  static Config parse(const std::string& text, const std::string& source_name = "config");
  static Config load(const std::string& path);  // ConfigError if unreadable

  const std::string& text() const { return text_; }
  const std::string& source() const { return source_; }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  // Keys are "section.key" ("key" at the top level). Each getter marks the key as known;
  // with no default, a missing key is an error. Type mismatches are errors (an integer is
  // accepted where a float is asked for).
  std::string get_string(const std::string& key);
  std::string get_string(const std::string& key, const std::string& def);
  std::int64_t get_int(const std::string& key);
  std::int64_t get_int(const std::string& key, std::int64_t def);
  double get_double(const std::string& key);
  double get_double(const std::string& key, double def);
  bool get_bool(const std::string& key, bool def);
  std::vector<std::string> get_strings(const std::string& key, const std::vector<std::string>& def);  // string or array
  std::vector<std::int64_t> get_ints(const std::string& key, const std::vector<std::int64_t>& def);  // integer or array
  // Marks the keys given as known without reading them (sections handled elsewhere).
  void mark_known(const std::string& key);
  // Throws ConfigError for the first key never asked for, listing the keys that were.
  void finish() const;
  // Range checks with the key in the message.
  void require(bool ok, const std::string& key, const std::string& what) const;

 private:
  const Value& at(const std::string& key);
  std::string where(const std::string& key) const;
  std::string text_, source_;
  std::map<std::string, Value> values_;
  std::set<std::string> known_;
};

}  // namespace fp4d
