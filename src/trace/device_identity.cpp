#include "trace/device_identity.hpp"

#include <sstream>

#include "trace/h5.hpp"

namespace fp4d {

std::string format_device_uuid(const std::array<unsigned char, 16>& bytes, const std::string& prefix) {
  static const char* const hex = "0123456789abcdef";
  std::string s = prefix;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[bytes[i] >> 4];
    s += hex[bytes[i] & 0xf];
  }
  return s;
}

void write_device_attributes(h5::Group root, const DeviceIdentity& d) {
  root.set_attr("device", d.device);
  const auto drop = [&](const char* name) {
    if (root.has_attr(name)) root.delete_attr(name);
  };
  if (d.is_cpu()) {
    for (const char* name : {"device_uuid", "device_ordinal", "device_pci_bus_id", "cuda_visible_devices"}) drop(name);
  } else {
    root.set_attr("device_uuid", d.uuid);
    root.set_attr("device_ordinal", d.ordinal);
    root.set_attr("device_pci_bus_id", d.pci_bus_id);
    if (d.cuda_visible_devices) root.set_attr("cuda_visible_devices", *d.cuda_visible_devices);
    else drop("cuda_visible_devices");
  }
  const std::string me = d.is_cpu() ? std::string("cpu") : d.uuid;
  std::string used = root.has_attr("devices_used") ? root.get_attr_string("devices_used") : std::string();
  std::stringstream ss(used);
  bool seen = false;
  for (std::string e; std::getline(ss, e, ',');) seen = seen || e == me;
  if (!seen) used += (used.empty() ? "" : ",") + me;
  root.set_attr("devices_used", used);
}

}  // namespace fp4d
