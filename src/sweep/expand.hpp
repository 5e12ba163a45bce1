// Sweep files and their expansion into runs (format in docs/sweeps.md).
//
//   base = "../configs/mlp-quick.toml"   # the config every run starts from (relative to this file)
//   out = "out/sweep-lr"                 # output directory (relative to the working directory)
//   workers = 2                          # concurrent runs (per MPI rank under mpirun)
//   backend = "cpu"                      # cpu | cuda
//   [grid.mlp]                           # grid axes: the cartesian product, first axis slowest
//   lr = [0.01, 0.02]
//   seed = [1, 2, 3]
//   [list.wide.mlp]                      # an explicit override set named "wide" (any values,
//   widths = [64, 256, 16]               # arrays too); with a grid, every list entry is
//                                        # combined with every grid point
//
// Each axis is a dotted config key: [grid.S] k = [...] sweeps S.k, [grid] k = [...] the top-level
// key k. Expansion materialises one complete config text per run (the base text with the
// overridden values replaced or added) and validates it with the workload's own parser, so an
// unknown key or a bad value stops the sweep before anything runs. A run's id is its index and a
// hash of its overrides' canonical values ("0003-1a2b3c4d"): the same sweep file always gives the
// same ids, which is how a rerun finds the runs already done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4d::sweep {

struct Override {
  std::string key;    // "mlp.lr", "workload"
  std::string value;  // TOML text, verbatim from the sweep file
};

struct SweepRun {
  int index = 0;
  std::string id;                    // "0003-1a2b3c4d"
  std::vector<Override> overrides;   // in axis order
  std::string label;                 // "mlp.lr=0.02 mlp.seed=1" (list entries: "wide: ...")
  std::string config_text;           // the complete, validated config
  std::string workload;              // sum | dot | mlp
};

struct Sweep {
  std::string source, text;            // the sweep file
  std::string base_source, base_text;  // the base config
  std::string out;                     // "" when the file gives none
  std::string backend = "cpu";
  std::int64_t workers = 1;
  std::vector<std::string> axes;       // every overridden key, in order of first appearance
  std::vector<SweepRun> runs;
};

// Expands a sweep given its text and its base config's text (no file access; ConfigError for
// every problem, naming the sweep file and line, or the run and key).
Sweep expand_sweep(const std::string& sweep_text, const std::string& sweep_source, const std::string& base_text,
                   const std::string& base_source);
// Reads the sweep file and the base it names (relative to the sweep file's directory).
Sweep load_sweep(const std::string& path);

// The base text with each override applied: an existing key's value is replaced, a missing key
// is added to its section (the section is appended if missing). The text must parse.
std::string apply_overrides(const std::string& base_text, const std::vector<Override>& overrides);

// Parses a run's config with the workload's own reader and refuses unknown keys (ConfigError);
// returns the workload.
std::string validate_run_config(const std::string& text, const std::string& source);

// 64-bit FNV-1a (http://www.isthe.com/chongo/tech/comp/fnv/): stable across builds and machines.
std::uint64_t fnv1a64(const std::string& s);

}  // namespace fp4d::sweep
