#include "util/config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

// toml++ is used header-only: the GPU image has no package for it, so the build there needs
// nothing but a copy of the headers (scripts/vendor-headers). Without exceptions its parse()
// returns the error as a value, which keeps the error path plain code. The formatters
// (TOML/JSON/YAML output) are not needed and only cost compile time.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#define TOML_ENABLE_FORMATTERS 0
#include <toml++/toml.h>

namespace fp4d {

std::string quote_for_message(std::string_view s, std::size_t max_chars) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    std::string piece;
    if (c == '\\') piece = "\\\\";
    else if (c == '\'') piece = "\\'";
    else if (c >= 0x20 && c < 0x7f) piece = std::string(1, ch);
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      piece = buf;
    }
    // Never split an escape: the cut falls before the piece that would pass the limit.
    if (out.size() + piece.size() > max_chars) return out + "...";
    out += piece;
  }
  return out;
}

namespace {

// Source names (paths, "value '...'") only lose their non-printable bytes: they are not
// values, and cutting a path would hide which file is meant.
std::string printable(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

const char* type_name(const Config::Scalar& s) {
  switch (s.index()) {
    case 0: return "a string";
    case 1: return "an integer";
    case 2: return "a float";
    default: return "a boolean";
  }
}

// "a string 'x'", "a float 1.5": the type and the value, for type-mismatch messages.
std::string describe(const Config::Scalar& s) {
  std::string out = type_name(s);
  out += ' ';
  if (const auto* p = std::get_if<std::string>(&s)) return out + "'" + quote_for_message(*p) + "'";
  if (const auto* i = std::get_if<std::int64_t>(&s)) return out + std::to_string(*i);
  if (const auto* d = std::get_if<double>(&s)) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, *d);  // shortest text that reads back
    return out + std::string(buf, r.ptr);
  }
  return out + (std::get<bool>(s) ? "true" : "false");
}

// Line `n` (1-based) of `text`, without its line break.
std::string_view line_of(std::string_view text, std::size_t n) {
  std::size_t b = 0;
  for (std::size_t i = 1; i < n; ++i) {
    const std::size_t nl = text.find('\n', b);
    if (nl == std::string_view::npos) return {};
    b = nl + 1;
  }
  std::size_t e = text.find('\n', b);
  if (e == std::string_view::npos) e = text.size();
  if (e > b && text[e - 1] == '\r') --e;
  return text.substr(b, e - b);
}

// What a toml++ error description means for someone editing a config, where its own words
// ("expected a comment or whitespace") leave the reader to work it out.
std::string hint_for(std::string_view context, std::string_view detail) {
  auto has = [](std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; };
  if (has(detail, "cannot redefine")) return "a key or table appears twice";
  if (has(detail, "not representable in 64 bits")) return "integer out of range";
  if (has(detail, "underscores")) return "misplaced '_' in a number";
  if (has(detail, "escape sequence")) return "unsupported escape in a string";
  if (has(detail, "could not determine value type")) return "not a value (strings need quotes)";
  if (has(detail, "expected '='")) return "expected 'key = value'";
  if (has(detail, "invalid utf-8") || has(context, "invalid utf-8")) return "the file is not valid UTF-8";
  if (has(detail, "control characters")) return "a control character";
  if (context == "string" && has(detail, "end-of-file")) return "unterminated string";
  if (context == "floating-point") return has(detail, "could not be interpreted") ? "number out of range" : "not a number";
  if (context == "key-value pair") {
    if (has(detail, "expected a comment or whitespace")) return "text after the value";
    if (has(detail, "expected value") || has(detail, "end-of-file")) return "missing value";
  }
  if (context == "table header" && has(detail, "expected a comment or whitespace")) return "text after a section header";
  return "";
}

// toml++'s error as one line: "FILE:LINE:COL: HINT: DETAIL (parsing CONTEXT) in 'LINE TEXT'".
std::string parse_error_message(const toml::parse_error& e, std::string_view text, const std::string& source) {
  const std::string_view desc = e.description();
  constexpr std::string_view lead = "Error while parsing ";
  std::string_view context, detail = desc;
  if (desc.substr(0, lead.size()) == lead) {
    const std::size_t colon = desc.find(": ", lead.size());
    if (colon != std::string_view::npos) {
      context = desc.substr(lead.size(), colon - lead.size());
      detail = desc.substr(colon + 2);
    }
  }
  const auto& at = e.source().begin;
  std::string msg = printable(source) + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": ";
  const std::string hint = hint_for(context, detail);
  if (!hint.empty()) msg += hint + ": ";
  msg += printable(detail);
  if (!context.empty()) msg += " (parsing " + printable(context) + ")";
  msg += " in '" + quote_for_message(line_of(text, at.line)) + "'";
  return msg;
}

bool bare_key(std::string_view k) {
  if (k.empty()) return false;
  for (const char c : k)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

// Flattens a parsed document into "a.b.c" keys, collecting what the getters cannot represent.
// The earliest problem by line is reported, as a reader scanning the file would meet it.
struct Flattener {
  std::map<std::string, Config::Value>& out;
  int bad_line = std::numeric_limits<int>::max();
  std::string bad_what{};

  void problem(int line, const std::string& what) {
    if (line < bad_line) {
      bad_line = line;
      bad_what = what;
    }
  }

  void table(const toml::table& t, const std::string& prefix) {
    for (const auto& [k, node] : t) {
      const int line = static_cast<int>(k.source().begin.line);
      if (!bare_key(k.str())) {
        // A quoted key such as "a.b" would flatten into the same name as a.b.
        problem(line, "key '" + quote_for_message(k.str()) + "' is not a bare key (letters, digits, '_' and '-')");
        continue;
      }
      const std::string key = prefix + std::string(k.str());
      if (const toml::table* sub = node.as_table()) {
        table(*sub, key + ".");
        continue;
      }
      Config::Value v;
      v.line = line;
      if (const toml::array* arr = node.as_array()) {
        v.is_array = true;
        for (const toml::node& item : *arr) {
          if (item.is_table()) {
            problem(line, "'" + key + "': arrays of tables are not supported: use [" + key + "] sections with other names");
            break;
          }
          if (item.is_array()) {
            problem(line, "'" + key + "': nested arrays are not supported");
            break;
          }
          std::string why;
          v.items.push_back(scalar(item, why));
          if (!why.empty()) {
            problem(line, "'" + key + "': " + why);
            break;
          }
          if (v.items.back().index() != v.items.front().index()) {
            problem(line, "'" + key + "': an array mixes value types (" + type_name(v.items.front()) + " and " +
                              type_name(v.items.back()) + ")");
            break;
          }
        }
      } else {
        std::string why;
        v.items.push_back(scalar(node, why));
        if (!why.empty()) problem(line, "'" + key + "': " + why);
      }
      out[key] = std::move(v);  // unique: toml++ refuses a key defined twice
    }
  }

  static Config::Scalar scalar(const toml::node& n, std::string& why) {
    if (const auto* s = n.as_string()) return s->get();
    if (const auto* i = n.as_integer()) return static_cast<std::int64_t>(i->get());
    if (const auto* b = n.as_boolean()) return b->get();
    if (const auto* d = n.as_floating_point()) {
      if (!std::isfinite(d->get())) why = "inf and nan are not accepted (a config never needs them)";
      return d->get();
    }
    why = "dates and times are not supported (a config never needs them)";
    return false;
  }
};

}  // namespace

Config Config::parse(const std::string& text, const std::string& source_name) {
  if (text.size() > kMaxConfigBytes)
    throw ConfigError(printable(source_name) + ": " + std::to_string(text.size()) + " bytes, more than the " +
                      std::to_string(kMaxConfigBytes >> 20) + " MiB a config file may have");
  Config cfg;
  cfg.text_ = text;
  cfg.source_ = source_name;
  // toml++ refuses invalid UTF-8, NUL and the other control characters TOML forbids.
  toml::parse_result doc = toml::parse(std::string_view(text), std::string_view(source_name));
  if (!doc) throw ConfigError(parse_error_message(doc.error(), text, source_name));
  Flattener f{cfg.values_};
  f.table(doc.table(), "");
  if (!f.bad_what.empty()) throw ConfigError(printable(source_name) + ":" + std::to_string(f.bad_line) + ": " + f.bad_what);
  return cfg;
}

Config Config::load(const std::string& path) {
  // An ifstream opens a directory and reads nothing: it would parse as an empty config and
  // fail later with a misleading "missing key".
  if (std::filesystem::is_directory(path))
    throw ConfigError("config file '" + printable(path) + "' is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ConfigError("cannot read config file '" + printable(path) + "'");
  // One byte past the cap tells "too large" from "exactly the cap", and bounds what an
  // endless source (/dev/zero, a pipe) can make us read.
  std::string text(kMaxConfigBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (f.bad()) throw ConfigError("cannot read config file '" + printable(path) + "'");
  text.resize(static_cast<std::size_t>(f.gcount()));
  if (text.size() > kMaxConfigBytes)
    throw ConfigError("config file '" + printable(path) + "' is larger than the " + std::to_string(kMaxConfigBytes >> 20) +
                      " MiB a config file may have (is it a config?)");
  return parse(text, path);
}

std::string Config::where(const std::string& key) const {
  std::string out = printable(source_);
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
    std::string msg = printable(source_) + ": missing key '" + key + "'";
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
  throw ConfigError(where + " must be " + want + ", got " + describe(v.items.front()));
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
    if (!p) throw ConfigError(where(key) + " must be a string or an array of strings, got " + describe(s));
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
    if (!p) throw ConfigError(where(key) + " must be an integer or an array of integers, got " + describe(s));
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
    throw ConfigError(printable(source_) + ":" + std::to_string(v.line) + ": unknown config key '" + key + "'" +
                      (near.empty() ? "" : " (did you mean '" + near + "'?)") + " (known keys: " + list + ")");
  }
}

void Config::require(bool ok, const std::string& key, const std::string& what) const {
  // Callers may put a value in `what`: the message stays one line whatever it holds.
  if (!ok) throw ConfigError(where(key) + ": " + printable(what));
}

}  // namespace fp4d
