// The `lm` workload's run (sim/lm_run.hpp): the trace it writes, bit-exact resumption after a
// stop (with a double and a binary128 reference), the BF16 switch, token files, and the config
// errors that must stop it before a trace exists.
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/lm_run.hpp"
#include "sim/token_source.hpp"
#include "support/catch.hpp"
#include "support/thrown.hpp"
#include "support/config_error.hpp"
#include "support/temp_dir.hpp"
#include "support/trace_datasets.hpp"
#include "trace/h5.hpp"
#include "trace/lm_trace.hpp"
#include "trace/token_file.hpp"
#include "util/config.hpp"

using namespace fp4d;
using fp4d_test::config_error_of;
using fp4d_test::contains;
using fp4d_test::TempDir;

namespace {

// A model every recipe tiles: M = batch x seq_len = 32, every dimension a multiple of 16.
std::string tiny_config(const std::string& extra_recipes = "", const std::string& data = "") {
  return "workload = \"lm\"\n"
         "[lm]\nsteps = 12\nvocab = 16\nd_model = 32\nheads = 2\nkv_heads = 1\nffn = 32\nseq_len = 16\nbatch = 2\n"
         "pattern = \"AF\"\n"
         "[lm.optimizer]\nlr = 0.01\nschedule = \"warmup-cosine\"\nwarmup_steps = 2\n" +
         (data.empty() ? std::string("[data]\norder = 1\nzipf_support = 4\ncopy_prob = 0.1\ncopy_length = 3\n") : data) +
         "[recipes]\nnames = [\"nvfp4\", \"fp32\"]\n" + extra_recipes +
         "[reference]\ncompare_every = 4\nprobe_draws = 2\n[trace]\nflush_every = 5\n";
}

LmRunSpec parse(const std::string& text) {
  Config cfg = Config::parse(text, "test.toml");
  REQUIRE(cfg.get_string("workload") == "lm");
  LmRunSpec s = parse_lm_run(cfg);
  cfg.finish();
  return s;
}

LmRunControl control(const std::string& path, const std::string& text) {
  LmRunControl c;
  c.path = path;
  c.config_text = text;
  c.config_source = "test.toml";
  c.command_line = "test";
  return c;
}

std::map<std::string, std::vector<double>> datasets(const std::string& path) {
  const h5::File f = h5::File::open_read(path);
  return fp4d::test::numeric_datasets(f.root());
}

// Runs `text` into `path` and stops it (as SIGINT does) once `stop_after` steps are done.
void interrupt_after(const LmRunSpec& spec, const std::string& path, const std::string& text, std::int64_t stop_after) {
  std::atomic<bool> stop{false};
  LmRunControl c = control(path, text);
  c.stop = &stop;
  c.progress = [&](std::int64_t done, std::int64_t) {
    if (done == stop_after) stop = true;
  };
  REQUIRE(run_lm(spec, c) == LmRunOutcome::Interrupted);
}

// Resumes `path` to completion; its trace must then be `whole`'s bit for bit.
void resume_matches(const LmRunSpec& spec, const std::string& path, const std::string& text, const std::string& whole) {
  LmRunControl r = control(path, text);
  r.resume = true;
  REQUIRE(run_lm(spec, r) == LmRunOutcome::Complete);
  fp4d::test::check_same_datasets(datasets(whole), datasets(path));
}

}  // namespace

TEST_CASE("lm run: a complete trace - every record and compare, the fp32 run beside the reference") {
  TempDir d("fp4d_test_lm_run");
  const std::string text = tiny_config();
  const LmRunSpec spec = parse(text);
  LmRunSummary sum;
  REQUIRE(run_lm(spec, control(d.file("t.h5"), text), &sum) == LmRunOutcome::Complete);
  CHECK_FALSE(std::filesystem::exists(d.file("t.h5.ckpt")));
  CHECK_FALSE(std::filesystem::exists(d.file("t.h5.rows")));
  const h5::File f = h5::File::open_read(d.file("t.h5"));
  const h5::Group root = f.root();
  CHECK(root.get_attr_string("status") == "complete");
  CHECK(root.get_attr_string("workload") == "lm");
  const h5::Group lm = root.open_group("lm");
  CHECK(lm.get_attr_string("recipes") == "nvfp4,fp32");
  CHECK(lm.get_attr_string("param_names") ==
        "embedding,blocks.0.norm,blocks.0.qkv,blocks.0.o,blocks.1.norm,blocks.1.gateup,blocks.1.down,final_norm,head");
  CHECK(lm.get_attr_string("linear_names") == "blocks.0.qkv,blocks.0.o,blocks.1.gateup,blocks.1.down,head");
  CHECK(lm.get_attr_double("loss_floor_nats") == loss_floor_nats(spec.synthetic, 16));
  const std::vector<std::int64_t> steps = root.read<std::int64_t>("lm/step");
  REQUIRE(steps.size() == 12);
  for (std::int64_t s = 0; s < 12; ++s) CHECK(steps[static_cast<std::size_t>(s)] == s);
  CHECK(root.read<std::int64_t>("lm/compare_step") == std::vector<std::int64_t>{4, 8, 12});
  h5::Dims dims;
  (void)root.read<double>("lm/runs/nvfp4/weight_rel_error", &dims);
  CHECK(dims == h5::Dims{3, 9});
  (void)root.read<double>("lm/runs/nvfp4/operand_nmse", &dims);
  CHECK(dims == h5::Dims{12, 5 * 6});
  // The reference's and the runs' step-0 losses are of the same initial weights (float32
  // values, exact in double) on the same batch: they differ only by rounding in the forward
  // pass. ln(vocab) is where an untrained model starts.
  const std::vector<double> ref = root.read<double>("lm/reference/loss");
  const std::vector<double> fp32 = root.read<double>("lm/runs/fp32/loss");
  CHECK(std::abs(ref[0] - std::log(16.0)) < 0.05 * std::log(16.0));
  CHECK(std::abs(fp32[0] - ref[0]) < 1e-5 * ref[0]);  // float32 forward: a few ulp of 2^-24 per op, far below 1e-5
  // NVFP4 quantizes: operand NMSE of an E2M1 grid is ~1e-2, not 0; fp32's operands are not
  // quantized, its statistics are zero.
  const std::vector<double> nmse = root.read<double>("lm/runs/nvfp4/operand_nmse");
  CHECK(nmse[0] > 1e-3);
  CHECK(nmse[0] < 0.1);
  const std::vector<double> nmse32 = root.read<double>("lm/runs/fp32/operand_nmse");
  CHECK(nmse32[0] == 0.0);
  // fp32 stays far closer to the reference than nvfp4 (weight error after 12 steps).
  const std::vector<double> e4 = root.read<double>("lm/runs/nvfp4/weight_rel_error_total");
  const std::vector<double> e32 = root.read<double>("lm/runs/fp32/weight_rel_error_total");
  CHECK(e32.back() < 1e-4);
  CHECK(e4.back() > 10 * e32.back());
  // The probe: the fp32 gradient at its own weights is the exact one to float32's accuracy.
  const std::vector<double> cos32 = root.read<double>("lm/runs/fp32/grad_cosine");
  for (const double c : cos32) CHECK(c > 1 - 1e-6);
  REQUIRE(sum.runs.size() == 2);
  CHECK(sum.runs[0].recipe == "nvfp4");
  CHECK(std::isfinite(sum.runs[0].tail_rel_loss_gap));
  CHECK(sum.runs[1].first_nonfinite_step == -1);
  CHECK(root.open_group("lm/runs/fp32").get_attr_double("tail_loss") == sum.runs[1].tail_loss);
  CHECK(root.is_dataset("lm/checkpoint/run_0_p_0"));
}

TEST_CASE("lm run: stopped and resumed, the trace is the uninterrupted run's bit for bit") {
  TempDir d("fp4d_test_lm_run");
  const std::string text = tiny_config();
  const LmRunSpec spec = parse(text);
  REQUIRE(run_lm(spec, control(d.file("whole.h5"), text)) == LmRunOutcome::Complete);
  for (const std::int64_t stop_after : {3, 5, 7}) {  // before, at and after a checkpoint (flush_every 5)
    INFO("stopped after step " << stop_after);
    const std::string path = d.file("part" + std::to_string(stop_after) + ".h5");
    interrupt_after(spec, path, text, stop_after);
    CHECK(h5::File::open_read(path).root().get_attr_string("status") == "interrupted");
    resume_matches(spec, path, text, d.file("whole.h5"));
  }
  SECTION("a complete trace or another config is refused") {
    LmRunControl r = control(d.file("whole.h5"), text);
    r.resume = true;
    CHECK(contains(fp4d_test::message_of([&] { run_lm(spec, r); }), "is complete"));
  }
}

// A hybrid of a Mamba-2 and an attention block (d_inner 64 in 16 heads of 4, state 16: the
// in-projection's 176 rows tile by 16) under NVFP4: the mixer's shape in /lm's attributes,
// its two linears' operand statistics quantized, the fp32 run beside the reference, and a
// resume after a checkpoint bit for bit.
TEST_CASE("lm run: a Mamba-2 hybrid runs, records its mixer and resumes bit for bit") {
  TempDir d("fp4d_test_lm_run");
  std::string text = tiny_config();
  const std::string from = "pattern = \"AF\"\n";
  text.replace(text.find(from), from.size(),
               "pattern = \"MA\"\n[lm.mamba]\nstate = 16\nhead_dim = 4\nchunk = 8\nconv_width = 3\n");
  const LmRunSpec spec = parse(text);
  REQUIRE(run_lm(spec, control(d.file("whole.h5"), text)) == LmRunOutcome::Complete);
  const h5::File f = h5::File::open_read(d.file("whole.h5"));
  const h5::Group lm = f.root().open_group("lm");
  CHECK(lm.get_attr_string("linear_kinds") == "mamba_in,mamba_out,qkv,o,head");
  CHECK(lm.get_attr_int64("mamba_chunk") == 8);
  CHECK(lm.get_attr_int64("mamba_conv_width") == 3);
  const std::vector<double> nmse = f.root().read<double>("lm/runs/nvfp4/operand_nmse");
  CHECK(nmse[0] > 1e-3);  // the mixer's in-projection (slot 0: its Fprop input) is NVFP4-quantized
  const std::vector<double> ref = f.root().read<double>("lm/reference/loss");
  const std::vector<double> fp32 = f.root().read<double>("lm/runs/fp32/loss");
  CHECK(std::abs(fp32[0] - ref[0]) < 1e-5 * ref[0]);
  const std::vector<double> e32 = f.root().read<double>("lm/runs/fp32/weight_rel_error_total");
  CHECK(e32.back() < 1e-4);

  interrupt_after(spec, d.file("part.h5"), text, 7);
  resume_matches(spec, d.file("part.h5"), text, d.file("whole.h5"));
}

// A binary128 reference: recorded as such, its states checkpointed exactly (three double limbs
// per value: some value needs its second limb, so the reference did not run in double), and a
// run stopped after a checkpoint of trained (truly wide) values resumes to the uninterrupted
// run's trace bit for bit - final checkpoint included. 8 steps: a binary128 step of this model
// takes ~0.1 s. Its losses are not double's (a different reference), yet its step-0
// loss is double's to within double's evaluation error (test_lm's bound for such models,
// 2 N_f K u (1 + |L|) with N_f = 11 forward reductions of length K <= 32).
TEST_CASE("lm run: a binary128 reference is recorded, checkpointed exactly and resumed bit for bit") {
  TempDir d("fp4d_test_lm_run");
  std::string base = tiny_config();
  base.replace(base.find("steps = 12"), 10, "steps = 8");
  std::string text = base;
  text.replace(text.find("compare_every = 4"), 17, "compare_every = 4\nprecision = \"binary128\"");
  const LmRunSpec spec = parse(text);
  REQUIRE(spec.reference_precision == MlpPrecision::Binary128);
  REQUIRE(run_lm(spec, control(d.file("whole.h5"), text)) == LmRunOutcome::Complete);
  REQUIRE(run_lm(parse(base), control(d.file("double.h5"), base)) == LmRunOutcome::Complete);
  {
    const h5::File f = h5::File::open_read(d.file("whole.h5"));
    const h5::Group root = f.root();
    CHECK(root.open_group("lm").get_attr_string("reference_precision") == "binary128");
    h5::Dims dims;
    const std::vector<double> limbs = root.read<double>("lm/checkpoint/reference_p_2", &dims);  // blocks.0.qkv
    REQUIRE(dims.size() == 2);
    CHECK(dims[1] == 3);
    bool second_limb = false;
    for (std::size_t i = 0; i < dims[0]; ++i) second_limb = second_limb || limbs[3 * i + 1] != 0.0;
    CHECK(second_limb);
    (void)root.read<float>("lm/checkpoint/run_0_p_2", &dims);
    CHECK(dims.size() == 1);
    const std::vector<double> wide = root.read<double>("lm/reference/loss");
    const std::vector<double> dbl = h5::File::open_read(d.file("double.h5")).root().read<double>("lm/reference/loss");
    CHECK(wide != dbl);
    const double u = std::ldexp(1.0, -53), K = 32, N_f = 11;
    CHECK(std::abs(wide[0] - dbl[0]) <= 2 * N_f * K * u * (1 + std::abs(wide[0])));
    CHECK(h5::File::open_read(d.file("double.h5")).root().open_group("lm").get_attr_string("reference_precision") ==
          "double");
  }
  {  // stopped after step 7: resumed from the step-5 checkpoint (flush_every 5)
    interrupt_after(spec, d.file("part.h5"), text, 7);
    resume_matches(spec, d.file("part.h5"), text, d.file("whole.h5"));
  }
  // The double config cannot resume the binary128 run's checkpoint (the config differs).
  {
    const std::string path = d.file("other.h5");
    interrupt_after(spec, path, text, 1);
    LmRunControl r = control(path, base);
    r.resume = true;
    CHECK(contains(fp4d_test::message_of([&] { run_lm(parse(base), r); }), "config differs"));
  }
}

TEST_CASE("lm run: switch_to_bf16_at trains the last steps in bf16") {
  TempDir d("fp4d_test_lm_run");
  const std::string text = tiny_config("switch_to_bf16_at = 0.5\n");
  const LmRunSpec spec = parse(text);
  CHECK(lm_switch_step(spec) == 6);
  REQUIRE(run_lm(spec, control(d.file("s.h5"), text)) == LmRunOutcome::Complete);
  const h5::File f = h5::File::open_read(d.file("s.h5"));
  CHECK(f.root().open_group("lm").get_attr_int64("switch_to_bf16_step") == 6);
  const std::vector<double> nmse = f.root().read<double>("lm/runs/nvfp4/operand_nmse");
  const std::size_t slots = 5 * 6;
  // Slot 0: Fprop activation of the first linear (not a high-precision one). E2M1 gives
  // NMSE ~1e-2; BF16's 8-bit significand ~1e-6.
  CHECK(nmse[5 * slots] > 1e-3);
  CHECK(nmse[6 * slots] < 1e-4);
  CHECK(nmse[6 * slots] > 0);
  // fp32 does not switch.
  CHECK(f.root().read<double>("lm/runs/fp32/operand_nmse")[11 * slots] == 0.0);
}

TEST_CASE("lm run: a token file is read, windows cut from it, and the run completes") {
  TempDir d("fp4d_test_lm_run");
  std::vector<std::int32_t> ids(4000);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + i / 13) % 16);
  write_token_file(d.file("tok.h5"), "/train", ids, 16);
  const std::string text = tiny_config("", "[data]\nsource = \"" + d.file("tok.h5") + "\"\nseed = 3\n");
  const LmRunSpec spec = parse(text);
  REQUIRE(spec.tokens);
  REQUIRE(run_lm(spec, control(d.file("f.h5"), text)) == LmRunOutcome::Complete);
  const h5::File f = h5::File::open_read(d.file("f.h5"));
  CHECK(std::isnan(f.root().open_group("lm").get_attr_double("loss_floor_nats")));
  CHECK(f.root().open_group("lm").get_attr_string("data") == d.file("tok.h5") + ":/train");
}

TEST_CASE("lm run: bad configs are refused naming the key, before any file exists") {
  TempDir d("fp4d_test_lm_run");
  const auto err = [&](const std::string& text) { return config_error_of([&] { parse(text); }); };
  const std::string base = tiny_config();
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string t = base;
    const std::size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    return t.replace(at, from.size(), to);
  };
  CHECK(contains(err(with("pattern = \"AF\"", "pattern = \"AXF\"")), "lm.pattern"));
  CHECK(contains(err(with("pattern = \"AF\"", "pattern = \"AXF\"")), "'X'"));
  CHECK(contains(err(with("heads = 2", "heads = 3")), "lm.heads"));
  CHECK(contains(err(with("kv_heads = 1", "kv_heads = 3")), "lm.kv_heads"));
  // batch x seq_len = 2 x 15 = 30 does not tile into NVFP4's 16-element blocks.
  const std::string untiled = err(with("seq_len = 16", "seq_len = 15"));
  CHECK(contains(untiled, "recipes.names"));
  CHECK(contains(untiled, "blocks of 16"));
  CHECK(contains(err(with("[recipes]\n", "[recipes]\nhigh_precision_layers = [2]\n")), "block 2 does not exist"));
  CHECK(contains(err(with("[recipes]\n", "[recipes]\nswitch_to_bf16_at = 1.0\n")), "recipes.switch_to_bf16_at"));
  CHECK(contains(err(with("order = 1", "order = 0")), "data.order"));
  // Mamba-2 blocks: the mixer's keys, a pattern without a sequence mixer, the in-projection's
  // tiling (d_inner 64 in 8 heads of 8: 2 x 64 + 2 x 16 + 8 = 168 rows).
  CHECK(contains(err(with("pattern = \"AF\"", "pattern = \"MF\"\n[lm.mamba]\nchunk = 5")), "lm.mamba.chunk"));
  CHECK(contains(err(with("pattern = \"AF\"", "pattern = \"MF\"\n[lm.mamba]\ngroups = 3")), "lm.mamba.groups"));
  CHECK(contains(err(with("pattern = \"AF\"", "pattern = \"FF\"")), "no sequence mixer"));
  {
    const std::string m = err(with("pattern = \"AF\"", "pattern = \"MF\"\n[lm.mamba]\nhead_dim = 8"));
    CHECK(contains(m, "recipes.names"));
    CHECK(contains(m, "in-projection rows"));
  }
  CHECK(contains(err(with("vocab = 16", "vocab = 12")), "lm.vocab"));  // the synthetic source needs a power of two
  CHECK(contains(err(with("lr = 0.01", "lr = -1")), "lm.optimizer.lr"));
  {  // a precision the lm does not have: the key, the value and exactly what it accepts
    const std::string p = err(with("compare_every = 4", "compare_every = 4\nprecision = \"mp1024\""));
    CHECK(contains(p, "reference.precision"));
    CHECK(contains(p, "'mp1024'"));
    CHECK(contains(p, "(known: double, binary128, mp256)"));
  }
  CHECK(contains(err(with("compare_every = 4", "compare_every = 4\ncheck_precision = \"mp256\"")),
                 "reference.check_precision"));
  CHECK(parse(with("compare_every = 4", "compare_every = 4\nprecision = \"mp256\"")).reference_precision ==
        MlpPrecision::Mp256);
  {
    Config cfg = Config::parse(with("pattern = \"AF\"", "pattern = \"AF\"\nwidth = 3"), "t.toml");
    (void)cfg.get_string("workload");
    (void)parse_lm_run(cfg);
    CHECK(contains(fp4d_test::message_of([&] { cfg.finish(); }), "lm.width"));
  }
  // Token files: an id >= vocab, a float dataset, a missing file - each named on data.source.
  std::vector<std::int32_t> ids(100, 3);
  ids[57] = 16;
  write_token_file(d.file("big.h5"), "/train", ids, 16);
  write_token_file(d.file("ok.h5"), "/train", std::vector<std::int32_t>(100, 3), 16);
  const std::string big = err(with("[data]\norder = 1\nzipf_support = 4\ncopy_prob = 0.1\ncopy_length = 3\n",
                                   "[data]\nsource = \"" + d.file("big.h5") + "\"\n"));
  CHECK(contains(big, "data.source"));
  CHECK(contains(big, "57"));
  {
    h5::File f = h5::File::create(d.file("float.h5"));
    f.root().write("train", std::vector<float>(100, 1.0f), h5::Dims{100});
  }
  const std::string flt = err(with("[data]\norder = 1\nzipf_support = 4\ncopy_prob = 0.1\ncopy_length = 3\n",
                                   "[data]\nsource = \"" + d.file("float.h5") + "\"\n"));
  CHECK(contains(flt, "data.source"));
  CHECK(contains(flt, "uint16"));
  CHECK(contains(err(with("[data]\norder = 1\nzipf_support = 4\ncopy_prob = 0.1\ncopy_length = 3\n",
                          "[data]\nsource = \"" + d.file("ok.h5") + "\"\norder = 2\n")),
                 "applies to data.source = \"synthetic\" only"));
  CHECK(std::filesystem::directory_iterator(d.path) != std::filesystem::directory_iterator());  // only the inputs
  for (const auto& e : std::filesystem::directory_iterator(d.path))
    CHECK((e.path().filename() == "big.h5" || e.path().filename() == "float.h5" || e.path().filename() == "ok.h5"));
}

TEST_CASE("lm run: a trained model beats the unigram loss of its data, toward the source's floor", "[long]") {
  // lm-quick's model and data for 400 steps, bf16 only: a model that learned nothing beyond
  // token frequencies sits at the unigram entropy; the order-1 Markov source's conditional
  // entropy is far below it. Beating the unigram loss by a quarter of the distance to the floor
  // needs the context (attention and the Markov structure); a broken backward or optimizer
  // cannot.
  TempDir d("fp4d_test_lm_run");
  const std::string text = std::string(
      "workload = \"lm\"\n[lm]\nsteps = 400\nvocab = 64\nd_model = 64\nheads = 4\nkv_heads = 2\nffn = 128\n"
      "seq_len = 32\nbatch = 8\npattern = \"AFAF\"\n[lm.optimizer]\nlr = 3e-3\nschedule = \"warmup-cosine\"\n"
      "warmup_steps = 20\n[data]\norder = 1\nzipf_alpha = 1.2\nzipf_support = 16\ncopy_prob = 0.05\ncopy_length = 4\n"
      "[recipes]\nnames = [\"bf16\"]\n[reference]\nenabled = false\n[trace]\nflush_every = 400\n");
  const LmRunSpec spec = parse(text);
  LmRunSummary s;
  REQUIRE(run_lm(spec, control(d.file("q.h5"), text), &s) == LmRunOutcome::Complete);
  INFO("unigram " << s.unigram_loss << ", floor " << s.loss_floor << ", bf16 tail " << s.runs[0].tail_loss);
  CHECK(s.loss_floor < s.unigram_loss - 1.0);
  CHECK(s.runs[0].tail_loss < s.unigram_loss - 0.25 * (s.unigram_loss - s.loss_floor));
  CHECK(s.runs[0].tail_loss > s.loss_floor - 0.05);  // nothing beats the Bayes loss (up to batch noise)
}
