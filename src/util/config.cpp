#include "util/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fp4d {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool bare_key(const std::string& k) {
  if (k.empty()) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

struct Cursor {
  const std::string& s;
  std::size_t i = 0;
  int line;
  std::string source;
  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError(source + ":" + std::to_string(line) + ": " + what);
  }
  void skip_ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  }
  bool at_end_or_comment() {
    skip_ws();
    return i >= s.size() || s[i] == '#' || s[i] == '\r';
  }
};

Config::Scalar parse_string(Cursor& c) {
  ++c.i;  // opening quote
  std::string out;
  while (c.i < c.s.size() && c.s[c.i] != '"') {
    char ch = c.s[c.i++];
    if (ch == '\\') {
      if (c.i >= c.s.size()) c.fail("unterminated escape in a string");
      const char e = c.s[c.i++];
      switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case 'n': ch = '\n'; break;
        case 't': ch = '\t'; break;
        default: c.fail(std::string("unsupported escape \\") + e + " in a string");
      }
    }
    out += ch;
  }
  if (c.i >= c.s.size()) c.fail("unterminated string (strings are one line, in double quotes)");
  ++c.i;
  return out;
}

Config::Scalar parse_number_or_bool(Cursor& c) {
  const std::size_t b = c.i;
  while (c.i < c.s.size() && c.s[c.i] != ',' && c.s[c.i] != ']' && c.s[c.i] != ' ' && c.s[c.i] != '\t' &&
         c.s[c.i] != '#' && c.s[c.i] != '\r')
    ++c.i;
  std::string tok = c.s.substr(b, c.i - b);
  if (tok == "true") return true;
  if (tok == "false") return false;
  {
    const std::size_t d = (!tok.empty() && (tok[0] == '+' || tok[0] == '-')) ? 1 : 0;
    if (d >= tok.size() || !(std::isdigit(static_cast<unsigned char>(tok[d])) || tok[d] == '.'))
      c.fail("not a value: '" + tok + "' (strings need double quotes; inf and nan are not accepted)");
  }
  std::string digits;
  for (std::size_t k = 0; k < tok.size(); ++k) {
    if (tok[k] == '_') {
      if (k == 0 || k + 1 == tok.size() || !std::isdigit(static_cast<unsigned char>(tok[k - 1])) ||
          !std::isdigit(static_cast<unsigned char>(tok[k + 1])))
        c.fail("misplaced '_' in the number '" + tok + "'");
      continue;
    }
    digits += tok[k];
  }
  if (digits.empty()) c.fail("missing value");
  const bool is_float = digits.find_first_of(".eE") != std::string::npos;
  const char* p = digits.c_str();
  char* end = nullptr;
  errno = 0;
  if (!is_float) {
    const long long v = std::strtoll(p, &end, 10);
    if (*end != '\0' || end == p) c.fail("not a value: '" + tok + "' (strings need double quotes)");
    if (errno == ERANGE) c.fail("integer out of range: '" + tok + "'");
    return static_cast<std::int64_t>(v);
  }
  const double v = std::strtod(p, &end);
  if (*end != '\0' || end == p || digits.find_first_of("xXpP") != std::string::npos)
    c.fail("not a number: '" + tok + "'");
  if (!std::isfinite(v)) c.fail("number out of range: '" + tok + "'");
  return v;
}

Config::Scalar parse_scalar(Cursor& c) {
  c.skip_ws();
  if (c.i >= c.s.size()) c.fail("missing value");
  if (c.s[c.i] == '"') return parse_string(c);
  if (c.s[c.i] == '\'' ) c.fail("literal 'strings' are not supported: use double quotes");
  if (c.s[c.i] == '{') c.fail("inline tables are not supported: use a [section]");
  if (c.s[c.i] == '[') c.fail("nested arrays are not supported");
  return parse_number_or_bool(c);
}

Config::Value parse_value(Cursor& c) {
  Config::Value v;
  v.line = c.line;
  c.skip_ws();
  if (c.i < c.s.size() && c.s[c.i] == '[') {
    v.is_array = true;
    ++c.i;
    c.skip_ws();
    if (c.i < c.s.size() && c.s[c.i] == ']') {
      ++c.i;
      return v;
    }
    for (;;) {
      v.items.push_back(parse_scalar(c));
      c.skip_ws();
      if (c.i < c.s.size() && c.s[c.i] == ',') {
        ++c.i;
        c.skip_ws();
        if (c.i < c.s.size() && c.s[c.i] == ']') {  // trailing comma
          ++c.i;
          break;
        }
        continue;
      }
      if (c.i < c.s.size() && c.s[c.i] == ']') {
        ++c.i;
        break;
      }
      c.fail("expected ',' or ']' in an array (arrays are one line)");
    }
    for (const auto& it : v.items)
      if (it.index() != v.items.front().index()) c.fail("an array mixes value types");
    return v;
  }
  v.items.push_back(parse_scalar(c));
  return v;
}

const char* type_name(const Config::Scalar& s) {
  switch (s.index()) {
    case 0: return "a string";
    case 1: return "an integer";
    case 2: return "a float";
    default: return "a boolean";
  }
}

}  // namespace

Config Config::parse(const std::string& text, const std::string& source_name) {
  Config cfg;
  cfg.text_ = text;
  cfg.source_ = source_name;
  std::istringstream in(text);
  std::string raw, section;
  std::set<std::string> sections;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    Cursor c{raw, 0, line, source_name};
    if (c.at_end_or_comment()) continue;
    if (raw[c.i] == '[') {
      const auto close = raw.find(']', c.i);
      if (close == std::string::npos) c.fail("unterminated section header");
      if (raw.compare(c.i, 2, "[[") == 0) c.fail("arrays of tables are not supported");
      section = trim(raw.substr(c.i + 1, close - c.i - 1));
      std::string part;
      std::istringstream parts(section);
      while (std::getline(parts, part, '.'))
        if (!bare_key(trim(part))) c.fail("bad section name '" + section + "'");
      if (!sections.insert(section).second) c.fail("section [" + section + "] appears twice");
      c.i = close + 1;
      if (!c.at_end_or_comment()) c.fail("text after a section header");
      continue;
    }
    const auto eq = raw.find('=', c.i);
    if (eq == std::string::npos) c.fail("expected 'key = value'");
    const std::string key = trim(raw.substr(c.i, eq - c.i));
    if (key.find('.') != std::string::npos) c.fail("dotted keys are not supported: use a [section]");
    if (!bare_key(key)) c.fail("bad key '" + key + "' (letters, digits, '_' and '-')");
    const std::string full = section.empty() ? key : section + "." + key;
    c.i = eq + 1;
    Value v = parse_value(c);
    if (!c.at_end_or_comment()) c.fail("text after the value of '" + key + "'");
    if (cfg.values_.count(full)) c.fail("key '" + full + "' appears twice");
    cfg.values_[full] = std::move(v);
  }
  return cfg;
}

Config Config::load(const std::string& path) {
  // An ifstream opens a directory and reads nothing: it would parse as an empty config and
  // fail later with a misleading "missing key".
  if (std::filesystem::is_directory(path)) throw ConfigError("config file '" + path + "' is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ConfigError("cannot read config file '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse(ss.str(), path);
}

std::string Config::where(const std::string& key) const {
  std::string out = source_;
  const auto it = values_.find(key);
  if (it != values_.end()) {
    out += ':';
    out += std::to_string(it->second.line);
  }
  out += ": '";
  out += key;
  out += '\'';
  return out;
}

namespace {
// Levenshtein distance (insertions, deletions, substitutions), for "did you mean" hints.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `key` within two edits (ties: the first), or "" if none.
template <class Keys>
std::string nearest_key(const std::string& key, const Keys& candidates) {
  std::string best;
  std::size_t best_d = 3;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(key, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}
}  // namespace

const Config::Value& Config::at(const std::string& key) {
  known_.insert(key);
  const auto it = values_.find(key);
  if (it == values_.end()) {
    // A required key that is absent is often present misspelled: name the unread key that is
    // nearest, or the missing-key message sends the user looking for the wrong problem.
    std::vector<std::string> unread;
    for (const auto& [k, v] : values_)
      if (!known_.count(k)) unread.push_back(k);
    const std::string near = nearest_key(key, unread);
    std::string msg = source_ + ": missing key '" + key + "'";
    if (!near.empty())
      msg += " (did you mean '" + near + "' at line " + std::to_string(values_.at(near).line) + "?)";
    throw ConfigError(msg);
  }
  return it->second;
}

void Config::mark_known(const std::string& key) { known_.insert(key); }

namespace {
template <class T>
const T& scalar_as(const Config::Value& v, const std::string& where, const char* want) {
  if (v.is_array || v.items.size() != 1) throw ConfigError(where + " must be " + want + ", not an array");
  if (const T* p = std::get_if<T>(&v.items.front())) return *p;
  throw ConfigError(where + " must be " + want + ", got " + type_name(v.items.front()));
}
}  // namespace

std::string Config::get_string(const std::string& key) { return scalar_as<std::string>(at(key), where(key), "a string"); }
std::string Config::get_string(const std::string& key, const std::string& def) {
  known_.insert(key);
  return has(key) ? get_string(key) : def;
}
std::int64_t Config::get_int(const std::string& key) {
  return scalar_as<std::int64_t>(at(key), where(key), "an integer");
}
std::int64_t Config::get_int(const std::string& key, std::int64_t def) {
  known_.insert(key);
  return has(key) ? get_int(key) : def;
}
double Config::get_double(const std::string& key) {
  const Value& v = at(key);
  if (!v.is_array && v.items.size() == 1)
    if (const auto* i = std::get_if<std::int64_t>(&v.items.front())) return static_cast<double>(*i);
  return scalar_as<double>(v, where(key), "a number");
}
double Config::get_double(const std::string& key, double def) {
  known_.insert(key);
  return has(key) ? get_double(key) : def;
}
bool Config::get_bool(const std::string& key, bool def) {
  known_.insert(key);
  return has(key) ? scalar_as<bool>(at(key), where(key), "true or false") : def;
}
std::vector<std::string> Config::get_strings(const std::string& key, const std::vector<std::string>& def) {
  known_.insert(key);
  if (!has(key)) return def;
  const Value& v = at(key);
  std::vector<std::string> out;
  for (const Scalar& s : v.items) {
    const auto* p = std::get_if<std::string>(&s);
    if (!p) throw ConfigError(where(key) + " must be a string or an array of strings, got " + type_name(s));
    out.push_back(*p);
  }
  return out;
}

std::vector<std::int64_t> Config::get_ints(const std::string& key, const std::vector<std::int64_t>& def) {
  known_.insert(key);
  if (!has(key)) return def;
  const Value& v = at(key);
  std::vector<std::int64_t> out;
  for (const Scalar& s : v.items) {
    const auto* p = std::get_if<std::int64_t>(&s);
    if (!p) throw ConfigError(where(key) + " must be an integer or an array of integers, got " + type_name(s));
    out.push_back(*p);
  }
  return out;
}

void Config::finish() const {
  for (const auto& [key, v] : values_) {
    if (known_.count(key)) continue;
    std::string list;
    for (const std::string& k : known_) list += (list.empty() ? "" : ", ") + k;
    const std::string near = nearest_key(key, known_);
    throw ConfigError(source_ + ":" + std::to_string(v.line) + ": unknown config key '" + key + "'" +
                      (near.empty() ? "" : " (did you mean '" + near + "'?)") + " (known keys: " + list + ")");
  }
}

void Config::require(bool ok, const std::string& key, const std::string& what) const {
  if (!ok) throw ConfigError(where(key) + ": " + what);
}

}  // namespace fp4d
