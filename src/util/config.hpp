// Experiment configuration files: TOML 1.0 (https://toml.io/en/v1.0.0), read with toml++, so
// that Python reads the same files with tomllib and the trace can carry the text verbatim.
// A hand-written subset parser used to accept text that is not TOML (`[]`, `.5`, `007`,
// control characters in comments), which made traces whose stored config tomllib refused;
// a conforming parser closes that gap for good.
//
// All of TOML is accepted except what a config never needs and the getters cannot
// represent: dates and times, inf and nan, arrays that mix value types, nested arrays and
// arrays of tables are refused with the line. Tables flatten to dotted keys: `[a.b]` with
// `c = 1`, `a.b.c = 1` and `a = {b = {c = 1}}` all give the key "a.b.c", so keys must be bare
// (A-Z a-z 0-9 _ -; a quoted key outside that set would be ambiguous once flattened).
// Files over kMaxConfigBytes are refused, and load() reads no more than that, so a device
// or a pipe given as the config fails at once instead of being read without end.
//
// Strictness is the point: every key a program reads is taken with one of the get_* calls,
// and finish() throws for every key that nobody read ("unknown config key 'sum.nn' at line
// 7 (known keys: ...)"), so a typo never silently falls back to a default.
//
// Every message is one line: values, source lines and parser descriptions are quoted with
// quote_for_message (non-printable bytes as \xNN, long text cut with "...").
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fp4d {

// Raised for every problem in a config file; the message names the file, line and key.
struct ConfigError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The largest config (or sweep) file accepted. Real configs are a few kB; the cap bounds what
// a mistaken path (/dev/zero, a multi-GB file) can cost, and what a trace stores.
inline constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;

// `s` for an error message: bytes outside printable ASCII as \xNN (and \ as \\, ' as \'),
// at most about max_chars characters, then "...". The result never holds a newline.
std::string quote_for_message(std::string_view s, std::size_t max_chars = 60);

class Config {
 public:
  using Scalar = std::variant<std::string, std::int64_t, double, bool>;
  struct Value {
    std::vector<Scalar> items;  // one item for a scalar
    bool is_array = false;
    int line = 0;
  };

  static Config parse(const std::string& text, const std::string& source_name = "config");
  static Config load(const std::string& path);  // ConfigError if unreadable or over kMaxConfigBytes

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
