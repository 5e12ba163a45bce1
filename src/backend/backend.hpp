// The one seam between the commands and the hardware, as Ginkgo's executors are: a backend is
// chosen once, by name, and everything that differs between the CPU and a device goes through
// it. The CPU backend is the reference (quant/ and sim/); a device backend is tested against it
// bit for bit (quantizers, training steps) or against it and the exact product (GEMMs). A build
// without CUDA links a stub CUDA backend whose every entry throws BackendUnavailable
// (backend/no_cuda/), so no code above this header needs to know how it was built.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backend/accumulator_probe.hpp"
#include "model/lm_trainer.hpp"
#include "model/trainer.hpp"
#include "quant/matrix.hpp"
#include "quant/quantized.hpp"
#include "quant/spec.hpp"
#include "quant/training_recipe.hpp"
#include "trace/device_identity.hpp"

namespace fp4d {

// A backend that cannot run here: built without it, or no usable device. what() says which.
struct BackendUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What every entry of the stub CUDA backend (and of the CUDA-only benchmarks) throws:
// "<what>: fp4drift was built without CUDA (...)".
inline constexpr const char* kBuiltWithoutCuda =
    "fp4drift was built without CUDA (FP4DRIFT_CUDA=OFF or nvcc not found at configure time)";
[[noreturn]] inline void throw_built_without_cuda(const char* what) {
  throw BackendUnavailable(std::string(what) + ": " + kBuiltWithoutCuda);
}

struct GemmProductOptions {
  bool fp8_fast_accumulation = false;  // FP8 operands: the tensor cores' fast (less exact) accumulation
  // A device's library may choose any algorithm, split-K included. By default the device runs
  // only algorithms that sum each output in k order, the order the sm90 model describes.
  bool free_algorithm = false;
};

struct TrainerOptions {
  bool cuda_graphs = true;  // a device step replays as one CUDA graph (same bits either way)
  // Told when a recipe cannot stay resident on the device (recipe, why): that run quantizes on
  // the host and multiplies on the device.
  std::function<void(const std::string& recipe, const std::string& why)> on_host_fallback;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // as --backend spells it
  virtual bool is_device() const = 0;    // false: the CPU reference
  // Throws BackendUnavailable saying why when this backend cannot run here.
  virtual void require_available() const = 0;

  // quantize_cpu's contract (quant/quantize.hpp), on this backend.
  virtual QuantizedTensor quantize(const Matrix& x, const QuantSpec& spec) const = 0;
  // C = A B^T of two quantized operands as this backend's hardware computes it. Empty means
  // the CPU emulation (quant/gemm_emulated.hpp), which is what the CPU backend computes.
  // Throws std::invalid_argument for options the backend does not have.
  virtual QuantizedProduct gemm_product(const GemmProductOptions& opt) const = 0;
  // The path gemm_product takes for these operands, for traces ("cpu-emulation" on the CPU).
  virtual std::string gemm_path(const QuantizedTensor& a, const QuantizedTensor& b,
                                const GemmProductOptions& opt) const = 0;
  // How this backend makes the low-precision runs of the mlp workload.
  virtual TrainerFactory trainer_factory(const TrainerOptions& opt) const = 0;
  // How this backend makes the low-precision runs of the lm workload.
  virtual LmTrainerFactory lm_trainer_factory(const TrainerOptions& opt) const = 0;
  // The accumulator probes of docs/numerics.md 8b (device backends; the CPU throws
  // std::invalid_argument: its emulation's accumulator is the model, not a measurement).
  virtual std::vector<AccumulatorProbe> probe_accumulators(const std::vector<std::int64_t>& ks) const = 0;
  // The architecture of the device in use as nvcc names it, then its name: "sm_90 (NVIDIA
  // H200)"; "cpu" for the CPU.
  virtual std::string device_architecture() const = 0;
  // The device this process computes on, for the traces' device attributes: name, UUID,
  // ordinal, PCI bus id and the CUDA_VISIBLE_DEVICES it saw; DeviceIdentity{} ("cpu") for the
  // CPU. Throws BackendUnavailable where the backend cannot run.
  virtual DeviceIdentity device_identity() const = 0;
  // The devices a sweep spreads its runs over (CUDA_VISIBLE_DEVICES values); empty: the CPU.
  virtual std::vector<std::string> devices() const = 0;
};

const Backend& cpu_backend();
const Backend& cuda_backend();  // backend/cuda/cuda_backend.cpp, or the stub without CUDA

// The names --backend and the sweep files accept, and the backend of a name (throws
// std::invalid_argument "must be cpu or cuda" for any other).
const std::vector<std::string>& backend_names();
bool is_backend_name(std::string_view name);
const Backend& backend_named(std::string_view name);

}  // namespace fp4d
