#include "sweep/state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "sweep/toml_text.hpp"
#include "trace/h5.hpp"
#include "trace/lm_trace.hpp"
#include "trace/mlp_trace.hpp"
#include "trace/sum_dot_trace.hpp"
#include "util/config.hpp"

namespace fp4d::sweep {

namespace fs = std::filesystem;

RunPaths::RunPaths(const std::string& outdir, const std::string& id) {
  dir = (fs::path(outdir) / "runs" / id).string();
  config = dir + "/config.toml";
  trace = dir + "/trace.h5";
  log = dir + "/log.txt";
  record = dir + "/result.toml";
}

std::string trace_status(const std::string& trace) {
  if (!fs::exists(trace)) return "";
  try {
    h5::File f = h5::File::open_read(trace);
    return f.root().get_attr_string("status");
  } catch (const h5::Error&) {
    return "unreadable";
  } catch (const h5::FileInUse&) {
    return "in use";  // held by another process: its run decides, when it is resumed, what it is
  }
}

Action plan_run(const RunPaths& p) {
  const std::string st = trace_status(p.trace);
  if (st == "complete") return Action::Skip;
  // A run with a checkpoint is resumed however it stopped (a clean stop, a kill, a lost node,
  // a full disk): the resume verifies the trace against the checkpoint and rebuilds it from
  // its journal where a crash tore it, or refuses - and a refused resume starts again from
  // step 0 (Executor::poll). Runs without one (sum/dot, or killed while being created) start
  // again.
  if (st != "" && std::filesystem::exists(p.trace + ".ckpt")) return Action::Resume;
  return Action::Fresh;
}

std::string record_text(const RunRecord& r) {
  char wall[40];
  std::snprintf(wall, sizeof wall, "%.17g", r.wall_s);
  return "# fp4drift sweep: this run's record (rewritten after every attempt)\nstatus = " + toml_quote(r.status) +
         "\nexit_code = " + std::to_string(r.exit_code) + "\nwall_s = " + wall + "\nattempts = " +
         std::to_string(r.attempts) + "\nerror = " + toml_quote(r.error) + "\nrank = " + std::to_string(r.rank) +
         "\ncuda_visible_devices = " + toml_quote(r.cuda_visible_devices) + "\n";
}

RunRecord parse_record(const std::string& text, const std::string& source) {
  Config c = Config::parse(text, source);
  RunRecord r;
  r.status = c.get_string("status");
  r.exit_code = static_cast<int>(c.get_int("exit_code"));
  r.wall_s = c.get_double("wall_s");
  r.attempts = static_cast<int>(c.get_int("attempts"));
  r.error = c.get_string("error");
  r.rank = static_cast<int>(c.get_int("rank", 0));
  r.cuda_visible_devices = c.get_string("cuda_visible_devices", "");  // absent from older records
  c.finish();
  return r;
}

RunRecord read_record(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::ostringstream ss;
  ss << f.rdbuf();
  try {
    return parse_record(ss.str(), path);
  } catch (const ConfigError&) {
    return {};
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const auto fail = [&](const std::string& what, int err) {
    ::unlink(tmp.c_str());
    if (err == ENOSPC) throw h5::DiskFull("cannot " + what + " " + tmp + ": no space left on device");
    throw std::runtime_error("cannot " + what + " " + tmp + ": " + std::strerror(err));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", errno);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int err = errno;
      ::close(fd);
      fail("write", err);
    }
    done += static_cast<std::size_t>(w);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("sync", err);
  }
  ::close(fd);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fail("rename", ec.value());
}

void write_record(const std::string& path, const RunRecord& r) { write_file_atomically(path, record_text(r)); }

namespace {

// The run summary attributes of a recipe group (mlp and lm write the same names through
// trace/run_summary_attrs.hpp and their kLossGapMeanAttr / kQuantizedWeightRelErrorAttr).
// A trace written before them has none of them: the fields keep their "unknown" values.
void read_headline(const h5::Group& g, RecipeMetrics& r) {
  static_assert(std::string_view(mlp_trace::kLossGapMeanAttr) == lm_trace::kLossGapMeanAttr);
  static_assert(std::string_view(mlp_trace::kQuantizedWeightRelErrorAttr) == lm_trace::kQuantizedWeightRelErrorAttr);
  if (g.has_attr(mlp_trace::kLossGapMeanAttr)) {
    r.rel_loss_gap_window_mean = g.get_attr_double(mlp_trace::kLossGapMeanAttr);
    r.gap_window_first_step = g.get_attr_int64("gap_window_first_step");
    r.gap_window_last_step = g.get_attr_int64("gap_window_last_step");
  }
  if (g.has_attr(mlp_trace::kQuantizedWeightRelErrorAttr))
    r.quantized_weight_rel_error = g.get_attr_double(mlp_trace::kQuantizedWeightRelErrorAttr);
  if (g.has_attr("quantized_growth_exponent")) {
    r.quantized_growth_exponent = g.get_attr_double("quantized_growth_exponent");
    const std::vector<double> ci = g.get_attr_double_vector("quantized_growth_ci");
    const std::vector<std::int64_t> win = g.get_attr_int64_vector("quantized_growth_window");
    if (ci.size() == 2) r.quantized_growth_ci_low = ci[0], r.quantized_growth_ci_high = ci[1];
    if (win.size() == 2) r.quantized_growth_first_step = win[0], r.quantized_growth_last_step = win[1];
  }
}

}  // namespace

RunMetrics read_metrics(const std::string& trace) {
  namespace sd = sum_dot_trace;
  namespace ml = mlp_trace;
  RunMetrics m;
  h5::File f = h5::File::open_read(trace);
  h5::Group root = f.root();
  if (root.is_group(sd::kGroup)) {
    h5::Group g = root.open_group(sd::kGroup);
    m.final_rms_error = g.read<double>(sd::kRmsError).back();
    m.final_mean_error = g.read<double>(sd::kMeanError).back();
    m.final_exact = g.read<double>(sd::kExact).back();
  }
  if (root.is_group(ml::kGroup)) {
    m.reference_final_loss = root.read<double>(ml::kReferenceLoss).back();
    std::string order = root.open_group(ml::kGroup).get_attr_string(ml::kRecipesAttr);
    std::stringstream ss(order);
    std::string name;
    while (std::getline(ss, name, ',')) {
      h5::Group g = root.open_group(std::string(ml::kRunsGroup) + "/" + name);
      RecipeMetrics r;
      r.recipe = name;
      r.final_loss = g.read<double>(ml::kLoss).back();
      r.final_rel_loss_gap = g.read<double>(ml::kRelLossGap).back();
      h5::Dims dims;
      const std::vector<double> err = g.read<double>(ml::kWeightRelError, &dims);
      if (!err.empty()) r.final_weight_rel_error = err.back();  // the last layer at the last compare
      r.growth_exponent = g.get_attr_double(ml::kGrowthExponentAttr);
      r.first_nonfinite_step = g.get_attr_int64(ml::kFirstNonfiniteStepAttr);
      read_headline(g, r);
      m.recipes.push_back(r);
    }
  }
  if (root.is_group(lm_trace::kGroup)) {
    namespace lt = lm_trace;
    m.reference_final_loss = root.read<double>(lt::kReferenceLoss).back();
    std::stringstream ss(root.open_group(lt::kGroup).get_attr_string(lt::kRecipesAttr));
    std::string name;
    while (std::getline(ss, name, ',')) {
      h5::Group g = root.open_group(std::string(lt::kRunsGroup) + "/" + name);
      RecipeMetrics r;
      r.recipe = name;
      r.final_loss = g.read<double>(lt::kLoss).back();
      r.final_rel_loss_gap = g.read<double>(lt::kRelLossGap).back();
      const std::vector<double> err = g.read<double>(lt::kWeightRelErrorTotal);
      if (!err.empty()) r.final_weight_rel_error = err.back();  // every parameter, at the last compare
      r.growth_exponent = g.get_attr_double(lt::kGrowthExponentAttr);
      r.first_nonfinite_step = g.get_attr_int64(lt::kFirstNonfiniteStepAttr);
      r.tail_loss = g.get_attr_double(lt::kTailLossAttr);
      r.tail_rel_loss_gap = g.get_attr_double(lt::kTailRelLossGapAttr);
      read_headline(g, r);
      m.recipes.push_back(r);
    }
  }
  return m;
}

}  // namespace fp4d::sweep
