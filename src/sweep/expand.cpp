#include "sweep/expand.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "backend/backend.hpp"
#include "sim/lm_run.hpp"
#include "sim/mlp_run.hpp"
#include "sim/sum_dot_run.hpp"
#include "sweep/toml_text.hpp"
#include "util/config.hpp"

namespace fp4d::sweep {

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string apply_overrides(const std::string& base_text, const std::vector<Override>& overrides) {
  std::string text = base_text;
  if (!text.empty() && text.back() != '\n') text += '\n';
  for (const Override& o : overrides) {
    const std::size_t dot = o.key.rfind('.');
    const std::string section = dot == std::string::npos ? "" : o.key.substr(0, dot);
    const std::string name = dot == std::string::npos ? o.key : o.key.substr(dot + 1);
    const std::vector<TomlLine> lines = scan_toml(text);
    const std::string added = name + " = " + o.value + "   # added by the sweep\n";
    bool done = false;
    for (const TomlLine& l : lines)
      if (l.kind == TomlLine::Key && l.full_key == o.key) {  // replace the value (and its comment)
        text = text.substr(0, l.value_begin) + o.value + "   # set by the sweep" + text.substr(l.end);
        done = true;
        break;
      }
    if (done) continue;
    // Insert after the last line of the section (before the next header), or at the top for
    // a top-level key.
    std::size_t at = std::string::npos;
    bool in_section = section.empty();
    for (const TomlLine& l : lines) {
      if (l.kind == TomlLine::Section) {
        if (in_section) break;
        in_section = l.section == section;
        if (in_section) at = l.end + 1;
        continue;
      }
      if (in_section && l.kind == TomlLine::Key) at = l.end + 1;
    }
    if (section.empty() && at == std::string::npos) {
      // no top-level key yet: before the first section header
      at = text.size();
      for (const TomlLine& l : lines)
        if (l.kind == TomlLine::Section) {
          at = l.begin;
          break;
        }
    }
    if (at == std::string::npos) text += "\n[" + section + "]\n" + added;
    else text.insert(std::min(at, text.size()), added);
  }
  return text;
}

std::string validate_run_config(const std::string& text, const std::string& source) {
  Config cfg = Config::parse(text, source);
  const std::string workload = cfg.get_string("workload");
  if (workload == "mlp") parse_mlp_run(cfg);
  else if (workload == "lm") parse_lm_run(cfg);
  else if (workload == "sum" || workload == "dot") parse_sum_dot_run(cfg, workload);
  else cfg.require(false, "workload", "must be sum, dot, mlp or lm");
  cfg.finish();
  return workload;
}

namespace {

struct Axis {
  std::string key;                  // the config key
  std::vector<std::string> values;  // grid: the values; list entries: one value
  int line = 0;
};

std::string strip_prefix(const std::string& full, std::size_t n) { return full.substr(n); }

}  // namespace

Sweep expand_sweep(const std::string& sweep_text, const std::string& sweep_source, const std::string& base_text,
                   const std::string& base_source) {
  Sweep s;
  s.source = sweep_source;
  s.text = sweep_text;
  s.base_source = base_source;
  s.base_text = base_text;
  Config cfg = Config::parse(sweep_text, sweep_source);
  Config::parse(base_text, base_source);  // the base must parse on its own
  s.out = cfg.get_string("out", "");
  s.workers = cfg.get_int("workers", 1);
  cfg.require(s.workers >= 1 && s.workers <= 4096, "workers", "must be in [1, 4096]");
  s.backend = cfg.get_string("backend", "cpu");
  cfg.require(is_backend_name(s.backend), "backend", "must be cpu or cuda");
  cfg.mark_known("base");

  auto fail = [&](int line, const std::string& what) -> void {
    throw ConfigError(sweep_source + ":" + std::to_string(line) + ": " + what);
  };
  std::vector<Axis> grid;
  std::vector<std::string> list_names;
  std::map<std::string, std::vector<Axis>> lists;
  for (const TomlLine& l : scan_toml(sweep_text)) {
    if (l.kind == TomlLine::Section) {
      if (l.section.rfind("list.", 0) == 0) {  // an entry exists from its header on: [list.base] is the base as is
        const std::string name = l.section.substr(5, l.section.find('.', 5) - 5);
        if (!lists.count(name)) {
          list_names.push_back(name);
          lists[name];
        }
        continue;
      }
      if (l.section == "grid" || l.section.rfind("grid.", 0) == 0) continue;
      if (l.section == "list") fail(l.line, "[list] needs a name: [list.NAME] or [list.NAME.SECTION]");
      fail(l.line, "unknown section [" + l.section + "] (a sweep file has [grid...] and [list.NAME...] sections)");
    }
    if (l.kind != TomlLine::Key) continue;
    const std::string value = value_text(sweep_text, l);
    if (l.section == "grid" || l.section.rfind("grid.", 0) == 0) {
      cfg.mark_known(l.full_key);
      if (!is_array(value)) fail(l.line, "grid axis '" + strip_prefix(l.full_key, 5) + "' must be an array of values");
      Axis a{strip_prefix(l.full_key, 5), split_array(value), l.line};
      if (a.values.empty()) fail(l.line, "grid axis '" + a.key + "' has no values");
      grid.push_back(a);
    } else if (l.section.rfind("list.", 0) == 0) {
      cfg.mark_known(l.full_key);
      const std::string rest = strip_prefix(l.full_key, 5);  // NAME.SECTION.key
      const std::size_t dot = rest.find('.');
      const std::string name = rest.substr(0, dot);
      if (!lists.count(name)) list_names.push_back(name);
      lists[name].push_back(Axis{rest.substr(dot + 1), {value}, l.line});
    }
  }
  cfg.finish();  // unknown top-level keys
  if (grid.empty() && list_names.empty())
    throw ConfigError(sweep_source + ": no runs: give [grid.SECTION] axes and/or [list.NAME.SECTION] entries");
  for (const Axis& a : grid)
    for (const auto& [name, entries] : lists)
      for (const Axis& e : entries)
        if (e.key == a.key)
          fail(e.line, "'" + a.key + "' is both a grid axis (line " + std::to_string(a.line) + ") and set by list entry '" +
                           name + "'");
  for (const Axis& a : grid) s.axes.push_back(a.key);
  for (const std::string& n : list_names)
    for (const Axis& e : lists[n])
      if (std::find(s.axes.begin(), s.axes.end(), e.key) == s.axes.end()) s.axes.push_back(e.key);

  // Override sets: every list entry (or one empty entry) times every grid point.
  std::vector<std::pair<std::string, std::vector<Override>>> sets;
  const std::vector<std::string> entries = list_names.empty() ? std::vector<std::string>{""} : list_names;
  std::size_t points = 1;
  for (const Axis& a : grid) points *= a.values.size();
  for (const std::string& name : entries)
    for (std::size_t p = 0; p < points; ++p) {
      std::vector<Override> ov;
      if (!name.empty())
        for (const Axis& e : lists[name]) ov.push_back({e.key, e.values.front()});
      std::size_t rem = p;  // mixed-radix digits, the last axis fastest
      std::vector<std::size_t> digit(grid.size());
      for (std::size_t k = grid.size(); k-- > 0;) {
        digit[k] = rem % grid[k].values.size();
        rem /= grid[k].values.size();
      }
      for (std::size_t k = 0; k < grid.size(); ++k) ov.push_back({grid[k].key, grid[k].values[digit[k]]});
      sets.emplace_back(name, ov);
    }

  std::map<std::string, int> seen;  // canonical override set -> run index
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const auto& [name, ov] = sets[i];
    SweepRun r;
    r.index = static_cast<int>(i);
    r.overrides = ov;
    std::vector<std::string> canon;
    for (const Override& o : ov) {
      r.label += (r.label.empty() ? "" : " ") + o.key + "=" + o.value;
      canon.push_back(o.key + "=" + canonical_value(o.value));
    }
    if (!name.empty()) r.label = name + ":" + (r.label.empty() ? "" : " ") + r.label;
    std::sort(canon.begin(), canon.end());
    std::string key;
    for (const std::string& c : canon) key += c + "\n";
    const auto [it, fresh] = seen.emplace(key, r.index);
    if (!fresh)
      throw ConfigError(sweep_source + ": runs " + std::to_string(it->second) + " (" + s.runs[it->second].label + ") and " +
                        std::to_string(r.index) + " (" + r.label + ") are the same run: remove the duplicate value or entry");
    char id[32];
    std::snprintf(id, sizeof id, "%04d-%08x", r.index, static_cast<unsigned>(fnv1a64(key) & 0xffffffffu));
    r.id = id;
    r.config_text = apply_overrides(base_text, ov);
    const std::string src = sweep_source + " run " + r.id + " (" + (r.label.empty() ? "the base config" : r.label) + ")";
    r.workload = validate_run_config(r.config_text, src);
    s.runs.push_back(std::move(r));
  }
  return s;
}

namespace {
std::string read_file(const std::string& path, const std::string& what) {
  // Paths are quoted: a newline in a file name would otherwise split the one-line error.
  const std::string shown = quote_for_message(path, 4096);
  // A directory opens and reads as empty text, which then fails as "missing key 'base'".
  if (std::filesystem::is_directory(path)) throw ConfigError("cannot read " + what + " '" + shown + "': it is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ConfigError("cannot read " + what + " '" + shown + "'");
  // At most one byte past the config cap: /dev/zero, a pipe or a multi-GB file given as a
  // sweep or base config is refused at once instead of being read into memory without end.
  std::string text(kMaxConfigBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (f.bad()) throw ConfigError("cannot read " + what + " '" + shown + "'");
  text.resize(static_cast<std::size_t>(f.gcount()));
  if (text.size() > kMaxConfigBytes)
    throw ConfigError(what + " '" + shown + "' is larger than the " + std::to_string(kMaxConfigBytes >> 20) +
                      " MiB a config file may have");
  return text;
}
}  // namespace

Sweep load_sweep(const std::string& path) {
  const std::string text = read_file(path, "sweep file");
  Config cfg = Config::parse(text, path);
  const std::string base = cfg.get_string("base");
  std::filesystem::path bp(base);
  if (bp.is_relative()) bp = std::filesystem::path(path).parent_path() / bp;
  return expand_sweep(text, path, read_file(bp.lexically_normal().string(), "base config (key 'base' of " + quote_for_message(path, 4096) + ")"),
                      bp.lexically_normal().string());
}

}  // namespace fp4d::sweep
