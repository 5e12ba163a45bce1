// Statement-level access to the text of a config file that Config::parse has already
// accepted (TOML, util/config.hpp): where each section and key is, and the verbatim text of
// each value. The sweep needs this because it edits config *text*: a run's config is the
// base file with some values replaced, so that comments and layout survive and the trace
// carries a file a person can read and rerun by hand.
//
// Understood: comments, `[a.b]` headers (blanks and quoted parts allowed), bare, quoted and
// dotted keys, all four kinds of strings (multi-line ones included) and arrays over several
// lines (one entry for the whole statement). Refused with a ConfigError naming the line,
// because an edit in the middle of them cannot be made line by line: inline tables
// (`m = {a = 1}`: write `[m]`), arrays of tables, and quoted keys with escapes.
//
// Nothing else is validated: call it only on text that Config::parse accepted.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fp4d::sweep {

// One line, or for a Key whose value spans lines (a multi-line array or string) the lines
// from its key to the end of its value.
struct TomlLine {
  enum Kind { Other, Section, Key } kind = Other;
  std::string section;         // Section: its name ("a.b"); Key: the table the key is in, dotted
                               // prefix included ("[a]" with "b.c = 1": "a.b"); Other: the header's
  std::string key;             // Key lines: the last part of the key ("c")
  std::string full_key;        // Key lines: "a.b.c" ("key" at the top level)
  std::size_t begin = 0;       // offset of the first line in the text
  std::size_t end = 0;         // offset of the '\n' ending the last line (or the text's size)
  std::size_t value_begin = 0, value_end = 0;  // Key lines: the value, without comment or trailing blanks
  int line = 0;                // 1-based, of the first line
};

std::vector<TomlLine> scan_toml(const std::string& text);
std::string value_text(const std::string& text, const TomlLine& l);

// The elements of an array value "[a, "b", c,]" as verbatim texts (without the blanks, line
// breaks and comments between them).
std::vector<std::string> split_array(const std::string& value);
bool is_array(const std::string& value);

// A canonical spelling of a value's meaning: equal for 0.02 and 2e-2, for 1_000 and 1000, for
// 2 and 2.0 (a float key reads both alike); different for 2 and "2".
// Throws ConfigError if the text is not a value.
std::string canonical_value(const std::string& value);

// A string as a TOML basic string: \" \\ \n \t, other control characters as \uXXXX, and a
// byte that is not UTF-8 as U+FFFD, so that the result always parses again.
std::string toml_quote(const std::string& s);

}  // namespace fp4d::sweep
