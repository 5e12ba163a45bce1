#include "sweep/toml_text.hpp"

#include <cmath>
#include <cstdio>

#include "util/config.hpp"

namespace fp4d::sweep {

namespace {
bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
bool space(char c) { return blank(c) || c == '\n'; }

[[noreturn]] void refuse(int line, const std::string& what) {
  throw ConfigError("config text line " + std::to_string(line) + ": " + what);
}

// The scanners below assume text that Config::parse accepted (valid TOML), so they only
// need to find where things end, never to judge them. Each returns the offset one past
// what it read.

// A string of any of TOML's four kinds starting at i (t[i] is a quote).
std::size_t skip_string(const std::string& t, std::size_t i) {
  const char q = t[i];
  const bool basic = q == '"';
  if (t.compare(i, 3, std::string(3, q)) == 0) {  // multi-line: up to two more quotes may close it
    for (std::size_t j = i + 3; j < t.size(); ++j) {
      if (basic && t[j] == '\\') {
        ++j;
        continue;
      }
      if (t.compare(j, 3, std::string(3, q)) == 0) {
        j += 3;
        for (int extra = 0; extra < 2 && j < t.size() && t[j] == q; ++extra) ++j;
        return j;
      }
    }
    return t.size();
  }
  for (std::size_t j = i + 1; j < t.size(); ++j) {
    if (basic && t[j] == '\\') {
      ++j;
      continue;
    }
    if (t[j] == q || t[j] == '\n') return j + 1;
  }
  return t.size();
}

std::size_t skip_comment(const std::string& t, std::size_t i) {
  const std::size_t nl = t.find('\n', i);
  return nl == std::string::npos ? t.size() : nl;
}

// One value starting at i: a string, an array or inline table (to its matching bracket,
// across lines, past strings and comments inside), or a bare scalar.
std::size_t skip_value(const std::string& t, std::size_t i) {
  if (i >= t.size()) return i;
  if (t[i] == '"' || t[i] == '\'') return skip_string(t, i);
  if (t[i] == '[' || t[i] == '{') {
    int depth = 0;
    while (i < t.size()) {
      const char c = t[i];
      if (c == '"' || c == '\'') {
        i = skip_string(t, i);
        continue;
      }
      if (c == '#') {
        i = skip_comment(t, i);
        continue;
      }
      ++i;
      if (c == '[' || c == '{') ++depth;
      if ((c == ']' || c == '}') && --depth == 0) return i;
    }
    return i;
  }
  while (i < t.size() && !space(t[i]) && t[i] != ',' && t[i] != ']' && t[i] != '}' && t[i] != '#') ++i;
  return i;
}

// A key (bare, quoted, dotted, with blanks around the dots) starting at i, up to `stop`;
// returns its parts joined by '.'. Config accepts only keys whose parts are bare-key
// characters, so a quoted part is its text between the quotes.
std::string read_key(const std::string& t, std::size_t& i, char stop, int line) {
  std::string key;
  for (;;) {
    while (i < t.size() && blank(t[i])) ++i;
    if (i >= t.size()) break;
    if (t[i] == '"' || t[i] == '\'') {
      const std::size_t e = skip_string(t, i);
      const std::string part = t.substr(i + 1, e - i - 2);
      if (part.find('\\') != std::string::npos) refuse(line, "a quoted key with an escape is not supported in sweeps");
      key += part;
      i = e;
    } else {
      const std::size_t b = i;
      while (i < t.size() && !blank(t[i]) && t[i] != '.' && t[i] != stop && t[i] != '\n') ++i;
      key += t.substr(b, i - b);
    }
    while (i < t.size() && blank(t[i])) ++i;
    if (i < t.size() && t[i] == '.') {
      key += '.';
      ++i;
      continue;
    }
    break;
  }
  return key;
}

// Past blanks and a comment to the line break ending a statement.
std::size_t to_line_end(const std::string& t, std::size_t i) {
  while (i < t.size() && blank(t[i])) ++i;
  if (i < t.size() && t[i] == '#') i = skip_comment(t, i);
  const std::size_t nl = t.find('\n', i);
  return nl == std::string::npos ? t.size() : nl;
}

int newlines(const std::string& t, std::size_t b, std::size_t e) {
  int n = 0;
  for (std::size_t i = b; i < e; ++i) n += t[i] == '\n';
  return n;
}
}  // namespace

std::vector<TomlLine> scan_toml(const std::string& text) {
  std::vector<TomlLine> out;
  std::string section;
  std::size_t pos = 0;
  int line = 1;
  while (pos < text.size()) {
    TomlLine l;
    l.begin = pos;
    l.line = line;
    l.section = section;
    std::size_t i = pos;
    while (i < text.size() && blank(text[i])) ++i;
    if (i < text.size() && text[i] == '[') {
      if (text.compare(i, 2, "[[") == 0) refuse(line, "arrays of tables ([[...]]) are not supported");
      ++i;
      section = read_key(text, i, ']', line);
      l.kind = TomlLine::Section;
      l.section = section;
      l.end = to_line_end(text, i + 1);
    } else if (i < text.size() && text[i] != '#' && text[i] != '\n') {
      const std::string key = read_key(text, i, '=', line);
      l.kind = TomlLine::Key;
      l.full_key = section.empty() ? key : section + "." + key;
      // The table the key belongs to: its header's plus the key's own dotted prefix, so that
      // `[grid]` with `sum.n = [...]` and `grid.sum.n = [...]` read as `[grid.sum]` with `n`.
      const std::size_t dot = l.full_key.rfind('.');
      l.section = dot == std::string::npos ? "" : l.full_key.substr(0, dot);
      l.key = l.full_key.substr(dot + 1);
      if (i >= text.size() || text[i] != '=') refuse(line, "expected 'key = value'");
      std::size_t v = i + 1;  // past '='
      while (v < text.size() && blank(text[v])) ++v;
      l.value_begin = v;
      l.value_end = skip_value(text, v);
      if (v < text.size() && text[v] == '{')
        refuse(line, "'" + l.full_key + "' is an inline table: sweeps edit config text line by line and cannot " +
                         "change a key inside one; write it as a [" + l.full_key + "] section");
      l.end = to_line_end(text, l.value_end);
    } else {
      l.end = to_line_end(text, i);
    }
    out.push_back(l);
    line += newlines(text, l.begin, l.end) + 1;
    pos = l.end + 1;
  }
  return out;
}

std::string value_text(const std::string& text, const TomlLine& l) {
  return text.substr(l.value_begin, l.value_end - l.value_begin);
}

bool is_array(const std::string& value) { return !value.empty() && value.front() == '['; }

std::vector<std::string> split_array(const std::string& value) {
  std::vector<std::string> out;
  if (!is_array(value)) return out;
  std::size_t i = 1;
  for (;;) {
    while (i < value.size() && (space(value[i]) || value[i] == ',' || value[i] == '#'))
      i = value[i] == '#' ? skip_comment(value, i) : i + 1;
    if (i >= value.size() || value[i] == ']') break;
    const std::size_t e = skip_value(value, i);
    out.push_back(value.substr(i, e - i));
    i = e;
  }
  return out;
}

namespace {
std::string canonical_scalar(const std::string& v) {
  Config c = Config::parse("v = " + v, "value '" + quote_for_message(v) + "'");
  try {
    return "s:" + toml_quote(c.get_string("v"));
  } catch (const ConfigError&) {
  }
  try {
    return c.get_bool("v", false) ? "b:true" : "b:false";
  } catch (const ConfigError&) {
  }
  // Numbers: integers and integral floats spell alike ("n:2" for 2 and 2.0: a float key
  // reads both as 2.0, an integer key refuses 2.0 when the run is validated), so that the
  // same run cannot hide behind two spellings.
  try {
    return "n:" + std::to_string(c.get_int("v"));
  } catch (const ConfigError&) {
  }
  const double d = c.get_double("v");
  if (d == std::trunc(d) && std::fabs(d) < 9.2e18) return "n:" + std::to_string(static_cast<long long>(d));
  char buf[40];
  std::snprintf(buf, sizeof buf, "n:%.17g", d);
  return buf;
}
}  // namespace

std::string canonical_value(const std::string& value) {
  if (!is_array(value)) return canonical_scalar(value);
  Config::parse("v = " + value, "value '" + quote_for_message(value) + "'");  // the whole array must parse
  std::string out = "[";
  for (const std::string& e : split_array(value)) out += canonical_scalar(e) + ",";
  return out + "]";
}

namespace {
// Length of the well-formed UTF-8 sequence at s[i] (1-4), or 0 if there is none.
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = b(i);
  const auto cont = [&](std::size_t k) { return (b(k) & 0xC0u) == 0x80u; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned c1 = b(i + 1);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F)) return 0;  // overlong, surrogate
    return cont(i + 1) && cont(i + 2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned c1 = b(i + 1);
    if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F)) return 0;  // overlong, past U+10FFFF
    return cont(i + 1) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;
}
}  // namespace

std::string toml_quote(const std::string& s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04X", u);
      out += buf;
    } else if (u >= 0x80) {
      // TOML text is UTF-8: a byte that starts no valid sequence becomes U+FFFD, or the file
      // written (a run record) would not parse again.
      const std::size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\\uFFFD";
        ++i;
      } else {
        out.append(s, i, n);
        i += n;
      }
      continue;
    } else {
      out += c;
    }
    ++i;
  }
  return out + "\"";
}

}  // namespace fp4d::sweep
