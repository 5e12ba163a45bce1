// What a long run (sim/mlp_run.hpp, sim/lm_run.hpp) is told by its caller besides its spec:
// where its trace goes, the provenance the trace records, how to stop it, and where its
// progress and notes go. Each workload's control adds what only it takes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "trace/device_identity.hpp"

namespace fp4d {

struct RunControl {
  std::string path;  // the trace
  std::string config_text, config_source, command_line;
  bool resume = false;
  const std::atomic<bool>* stop = nullptr;  // set by a signal handler: flush and return
  // Progress: called after each written record with (step done, total steps).
  std::function<void(std::int64_t, std::int64_t)> progress;
  std::string backend = "cpu";  // the backend's name, for the trace
  DeviceIdentity device;        // the backend's device, for the trace (Backend::device_identity)
  // Notes for the user (a request that cannot be honoured as asked), one line each.
  std::function<void(const std::string&)> note;
};

}  // namespace fp4d
