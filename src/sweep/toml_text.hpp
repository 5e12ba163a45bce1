// Line-level access to the text of a config file that Config::parse has already accepted
// (util/config.hpp's TOML subset): where each section and key is, and the verbatim text of
// each value. The sweep needs this because it edits config *text*: a run's config is the
// base file with some values replaced, so that comments and layout survive and the trace
// carries a file a person can read and rerun by hand.
//
// Nothing here validates: call it only on text that Config::parse accepted.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fp4d::sweep {

struct TomlLine {
  enum Kind { Other, Section, Key } kind = Other;
  std::string section;         // the section this line is in (for Section: its own name)
  std::string key;             // Key lines: the bare key
  std::string full_key;        // Key lines: "section.key" ("key" at the top level)
  std::size_t begin = 0;       // offset of the line in the text
  std::size_t end = 0;         // offset one past the line (before its '\n')
  std::size_t value_begin = 0, value_end = 0;  // Key lines: the value, without comment or trailing blanks
  int line = 0;                // 1-based
};

std::vector<TomlLine> scan_toml(const std::string& text);
std::string value_text(const std::string& text, const TomlLine& l);

// The elements of an array value "[a, "b", c,]" as verbatim texts (trimmed).
std::vector<std::string> split_array(const std::string& value);
bool is_array(const std::string& value);

// A canonical spelling of a value's meaning: equal for 0.02 and 2e-2, for 1_000 and 1000, for
// 2 and 2.0 (a float key reads both alike); different for 2 and "2".
// Throws ConfigError if the text is not a value.
std::string canonical_value(const std::string& value);

// A string as a TOML basic string (escapes \" \\ \n \t; other control characters dropped).
std::string toml_quote(const std::string& s);

}  // namespace fp4d::sweep
