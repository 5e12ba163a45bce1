// The identity the CUDA backend records in a run's trace (cuda::device_identity): a name, a
// UUID in NVIDIA's text form, the ordinal and PCI bus id of the current device, the
// CUDA_VISIBLE_DEVICES this process saw - and, where nvidia-smi exists, the same UUID and bus id
// as nvidia-smi reports for that GPU (NVML: an oracle independent of the CUDA runtime).
#include <cuda_runtime.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/device.hpp"
#include "support/catch.hpp"
#include "sweep/device_assignment.hpp"

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "00000000:19:00.0" (nvidia-smi) and "0000:19:00.0" (CUDA) name the same function: compare
// with the domain's leading zeros dropped, in lowercase.
std::string canonical_bus_id(const std::string& id) {
  const std::size_t colon = id.find(':');
  if (colon == std::string::npos) return lower(id);
  std::string domain = id.substr(0, colon);
  const std::size_t nz = domain.find_first_not_of('0');
  domain = nz == std::string::npos ? "0" : domain.substr(nz);
  return lower(domain + id.substr(colon));
}

// uuid -> PCI bus id of every GPU nvidia-smi lists; nothing (and *ran false) without nvidia-smi.
std::map<std::string, std::string> nvidia_smi_gpus(bool* ran) {
  std::map<std::string, std::string> out;
  *ran = false;
  FILE* p = popen("nvidia-smi --query-gpu=uuid,pci.bus_id --format=csv,noheader 2>/dev/null", "r");
  if (!p) return out;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    const std::size_t comma = s.find(',');
    if (comma == std::string::npos) continue;
    std::string bus = s.substr(comma + 1);
    bus.erase(0, bus.find_first_not_of(' '));
    out[lower(s.substr(0, comma))] = bus;
  }
  *ran = pclose(p) == 0 && !out.empty();
  return out;
}

}  // namespace

TEST_CASE("gpu device identity: name, UUID, ordinal, bus id and CUDA_VISIBLE_DEVICES of the current device") {
  const fp4d::DeviceIdentity d = fp4d::cuda::device_identity();
  int dev = -1;
  REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
  INFO(d.device << " " << d.uuid << " ordinal " << d.ordinal << " bus " << d.pci_bus_id);
  CHECK_FALSE(d.device.empty());
  CHECK_FALSE(d.is_cpu());
  CHECK(d.ordinal == dev);
  CHECK(std::regex_match(d.uuid, std::regex("(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")));
  CHECK(d.uuid.substr(4) != "00000000-0000-0000-0000-000000000000");
  CHECK(std::regex_match(d.pci_bus_id, std::regex("[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-9a-fA-F]")));
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  CHECK(d.cuda_visible_devices.has_value() == (cvd != nullptr));
  if (cvd) {
    CHECK(*d.cuda_visible_devices == cvd);
    // A list of UUIDs (full or abbreviated) names this device by a prefix of its UUID.
    const std::vector<std::string> listed = fp4d::sweep::parse_cuda_visible_devices(cvd);
    REQUIRE(static_cast<std::size_t>(dev) < listed.size());
    const std::string mine = listed[static_cast<std::size_t>(dev)];
    if (mine.rfind("GPU-", 0) == 0 || mine.rfind("MIG-", 0) == 0) CHECK(lower(d.uuid).rfind(lower(mine), 0) == 0);
  }
  // The backend seam gives the same identity.
  const fp4d::DeviceIdentity b = fp4d::cuda_backend().device_identity();
  CHECK(b.uuid == d.uuid);
  CHECK(b.pci_bus_id == d.pci_bus_id);
}

TEST_CASE("gpu device identity: every visible device has its own UUID and bus id") {
  int n = 0, dev = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
  std::set<std::string> uuids, buses;
  for (int i = 0; i < n; ++i) {
    REQUIRE(cudaSetDevice(i) == cudaSuccess);
    const fp4d::DeviceIdentity d = fp4d::cuda::device_identity();
    CHECK(d.ordinal == i);
    uuids.insert(d.uuid);
    buses.insert(d.pci_bus_id);
  }
  REQUIRE(cudaSetDevice(dev) == cudaSuccess);
  CHECK(uuids.size() == static_cast<std::size_t>(n));
  // MIG instances of one GPU share its bus id; whole GPUs do not.
  if (fp4d::cuda::device_identity().uuid.rfind("GPU-", 0) == 0) CHECK(buses.size() == static_cast<std::size_t>(n));
}

TEST_CASE("gpu device identity: the UUID and bus id are those nvidia-smi reports") {
  const fp4d::DeviceIdentity d = fp4d::cuda::device_identity();
  bool ran = false;
  const std::map<std::string, std::string> smi = nvidia_smi_gpus(&ran);
  if (!ran) {
    WARN("nvidia-smi is not available here: the comparison with it is skipped");
    return;
  }
  if (d.uuid.rfind("MIG-", 0) == 0) {
    WARN("a MIG instance: nvidia-smi --query-gpu lists the parent GPUs, the comparison is skipped");
    return;
  }
  INFO("CUDA: " << d.uuid << " at " << d.pci_bus_id);
  const auto it = smi.find(lower(d.uuid));
  REQUIRE(it != smi.end());
  CHECK(canonical_bus_id(it->second) == canonical_bus_id(d.pci_bus_id));
}
