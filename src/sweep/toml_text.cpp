#include "sweep/toml_text.hpp"

#include <cmath>
#include <cstdio>

#include "util/config.hpp"

namespace fp4d::sweep {

namespace {
bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && blank(s[b])) ++b;
  while (e > b && blank(s[e - 1])) --e;
  return s.substr(b, e - b);
}
// One past the end of the value that starts at i: stops at a '#' outside a string.
std::size_t value_end_at(const std::string& t, std::size_t i, std::size_t end) {
  bool in_str = false;
  std::size_t last = i;
  for (; i < end; ++i) {
    const char c = t[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
      last = i + 1;
      continue;
    }
    if (c == '#') break;
    if (c == '"') in_str = true;
    if (!blank(c)) last = i + 1;
  }
  return last;
}
}  // namespace

std::vector<TomlLine> scan_toml(const std::string& text) {
  std::vector<TomlLine> out;
  std::string section;
  std::size_t pos = 0;
  int line = 0;
  while (pos <= text.size()) {
    if (pos == text.size()) break;
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    TomlLine l;
    l.begin = pos;
    l.end = nl;
    l.line = ++line;
    std::size_t i = pos;
    while (i < nl && blank(text[i])) ++i;
    if (i < nl && text[i] == '[') {
      const std::size_t close = text.find(']', i);
      section = trim(text.substr(i + 1, close - i - 1));
      l.kind = TomlLine::Section;
      l.section = section;
    } else if (i < nl && text[i] != '#') {
      const std::size_t eq = text.find('=', i);
      l.kind = TomlLine::Key;
      l.section = section;
      l.key = trim(text.substr(i, eq - i));
      l.full_key = section.empty() ? l.key : section + "." + l.key;
      std::size_t v = eq + 1;
      while (v < nl && blank(text[v])) ++v;
      l.value_begin = v;
      l.value_end = value_end_at(text, v, nl);
    } else {
      l.section = section;
    }
    out.push_back(l);
    pos = nl + 1;
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
  const std::size_t close = value.rfind(']');
  std::string cur;
  bool in_str = false;
  for (std::size_t i = 1; i < close; ++i) {
    const char c = value[i];
    if (in_str) {
      cur += c;
      if (c == '\\' && i + 1 < close) cur += value[++i];
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    if (c == ',') {
      out.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!trim(cur).empty()) out.push_back(trim(cur));
  return out;
}

namespace {
std::string canonical_scalar(const std::string& v) {
  Config c = Config::parse("v = " + v, "value '" + v + "'");
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
  Config::parse("v = " + value, "value '" + value + "'");  // the whole array must parse
  std::string out = "[";
  for (const std::string& e : split_array(value)) out += canonical_scalar(e) + ",";
  return out + "]";
}

std::string toml_quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
  }
  return out + "\"";
}

}  // namespace fp4d::sweep
