#include "sweep/device_assignment.hpp"

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace fp4d::sweep {

namespace {

enum class Kind { Index, Uuid, Mig };

const char* kind_name(Kind k) { return k == Kind::Index ? "a device index" : k == Kind::Uuid ? "a GPU- UUID" : "a MIG- UUID"; }
const char* kind_plural(Kind k) { return k == Kind::Index ? "device indices" : k == Kind::Uuid ? "GPU- UUIDs" : "MIG- UUIDs"; }

std::string_view trimmed(std::string_view s) {
  const std::size_t a = s.find_first_not_of(" \t");
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

bool all_of(std::string_view s, bool (*ok)(char)) {
  if (s.empty()) return false;
  for (const char c : s)
    if (!ok(c)) return false;
  return true;
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_uuid_char(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-'; }
// MIG identifiers: MIG-<uuid> (driver R470 on), or MIG-GPU-<uuid>/<GPU instance>/<compute instance>.
bool is_mig_char(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '/';
}

bool classify(std::string_view e, Kind* kind) {
  if (all_of(e, is_digit)) {
    *kind = Kind::Index;
    return true;
  }
  if (e.substr(0, 4) == "GPU-" && all_of(e.substr(4), is_uuid_char)) {
    *kind = Kind::Uuid;
    return true;
  }
  if (e.substr(0, 4) == "MIG-" && all_of(e.substr(4), is_mig_char)) {
    *kind = Kind::Mig;
    return true;
  }
  return false;
}

std::string lowered(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

}  // namespace

std::vector<std::string> parse_cuda_visible_devices(std::string_view value) {
  const std::string head = "CUDA_VISIBLE_DEVICES='" + std::string(value) + "': ";
  std::vector<std::string_view> parts;
  for (std::size_t from = 0;;) {
    const std::size_t comma = value.find(',', from);
    parts.push_back(trimmed(value.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from)));
    if (comma == std::string_view::npos) break;
    from = comma + 1;
  }
  // CUDA stops at an empty last entry too, having read every device before it: "0,1," is the
  // list 0, 1 as written.
  if (parts.size() > 1 && parts.back().empty()) parts.pop_back();
  std::vector<std::string> out;
  Kind first = Kind::Index;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string_view e = parts[i];
    const std::string pos = "entry " + std::to_string(i + 1);
    if (e.empty()) {
      if (parts.size() == 1)
        throw std::invalid_argument(head + "set but empty, which shows CUDA no device (unset it to use every GPU)");
      throw std::invalid_argument(head + pos + " is empty; CUDA stops at it and shows only the devices before it");
    }
    Kind kind;
    if (!classify(e, &kind))
      throw std::invalid_argument(head + pos + " '" + std::string(e) +
                                  "' is neither a device index nor a GPU-/MIG- UUID; CUDA stops at it and shows only "
                                  "the devices before it");
    if (i == 0) first = kind;
    if (kind != first)
      throw std::invalid_argument(head + pos + " '" + std::string(e) + "' is " + kind_name(kind) + " in a list of " + kind_plural(first) +
                                  "; CUDA reads one kind of identifier per list: write every device the same way");
    std::string v(e);
    if (kind == Kind::Index) {
      const std::size_t nz = v.find_first_not_of('0');
      v = nz == std::string::npos ? "0" : v.substr(nz);
    }
    for (const std::string& seen : out)
      if (lowered(seen) == lowered(v))
        throw std::invalid_argument(head + pos + " '" + std::string(e) +
                                    "' repeats a device; CUDA shows no device at all for a list with a repeat");
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<std::string> enumerate_nvidia_devices(const std::string& dev_dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dev_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 6 && name.compare(0, 6, "nvidia") == 0 && all_of(std::string_view(name).substr(6), is_digit)) ++n;
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
  return out;
}

std::vector<std::string> visible_devices(const char* cuda_visible_devices, const std::string& dev_dir) {
  if (cuda_visible_devices) return parse_cuda_visible_devices(cuda_visible_devices);
  return enumerate_nvidia_devices(dev_dir);
}

std::string device_for_slot(const std::vector<std::string>& devices, int local_rank, int slots_per_rank, int slot) {
  if (slots_per_rank < 1 || slot < 0 || slot >= slots_per_rank || local_rank < 0)
    throw std::invalid_argument("device_for_slot: slot " + std::to_string(slot) + " of " + std::to_string(slots_per_rank) +
                                " on local rank " + std::to_string(local_rank) + " is out of range");
  if (devices.empty()) return "";
  const std::int64_t n = std::int64_t{local_rank} * slots_per_rank + slot;
  return devices[static_cast<std::size_t>(n % static_cast<std::int64_t>(devices.size()))];
}

std::vector<int> runs_per_device(std::size_t devices, int concurrent) {
  std::vector<int> out(devices, 0);
  if (devices == 0 || concurrent <= 0) return out;
  const auto g = static_cast<int>(devices);
  for (int k = 0; k < g; ++k) out[static_cast<std::size_t>(k)] = concurrent / g + (k < concurrent % g ? 1 : 0);
  return out;
}

std::string sharing_warning(const std::vector<std::string>& devices, int concurrent, const std::string& where) {
  if (devices.empty() || concurrent <= static_cast<int>(devices.size())) return "";
  const std::vector<int> n = runs_per_device(devices.size(), concurrent);
  std::string s = "fp4drift sweep: warning: " + std::to_string(concurrent) + " concurrent runs" + where + " on " +
                  std::to_string(devices.size()) + (devices.size() == 1 ? " GPU" : " GPUs") +
                  ": runs share a GPU, round robin (";
  if (n.front() == n.back()) {
    s += std::to_string(n.front()) + " on each";
  } else {
    s += "runs per GPU:";
    for (std::size_t k = 0; k < devices.size(); ++k) s += (k ? ", " : " ") + devices[k] + " " + std::to_string(n[k]);
  }
  return s + "); they contend for its memory and compute";
}

std::string device_uuid_prefix(const char* cuda_visible_devices, long long ordinal) {
  if (!cuda_visible_devices || ordinal < 0) return "GPU-";
  try {
    const std::vector<std::string> listed = parse_cuda_visible_devices(cuda_visible_devices);
    if (static_cast<unsigned long long>(ordinal) < listed.size() &&
        listed[static_cast<std::size_t>(ordinal)].rfind("MIG-", 0) == 0)
      return "MIG-";
  } catch (const std::invalid_argument&) {
  }
  return "GPU-";
}

}  // namespace fp4d::sweep
