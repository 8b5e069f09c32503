// spyre-sim run --workload resnet18:... / resnet50 / mobilenet_v3_small / vit_b_16 /
// train:resnet18,...: torchvision's architectures (the same layers, shapes and
// hyper-parameters, random weights) run on the simulated device, eagerly, reported with
// one row per layer (a residual block, an encoder layer; for training also the loss and
// backward, and the optimizer step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

namespace spyre::tools {

struct VisionSpec {
  std::string arch;  // resnet18, resnet50, mobilenet_v3_small, vit_b_16
  std::int64_t batch = 1;
  std::int64_t resolution = 224;
  c10::ScalarType dtype = c10::kHalf;
  bool train = false;  // train:ARCH: one SGD step (training-mode forward, cross_entropy, backward, fused SGD)

  // "resnet18" + {"8", "224", "fp16"}, or "train" + {"resnet18", "8", "64"}; a
  // UsageError for an unknown architecture or a bad parameter.
  static VisionSpec parse(const std::string& name, const std::vector<std::string>& args);
  std::string describe() const;
};

inline constexpr const char* kVisionHelp =
    "resnet18|resnet50|mobilenet_v3_small|vit_b_16[:BATCH,RES[,dtype]] | train:resnet18|...[,BATCH,RES[,dtype]]";

bool is_vision_workload(const std::string& name);

// Builds the model on device 0 (configured by the caller), runs it once (every kernel
// compiled and loaded), then once measured, layer by layer, and returns the run report
// (report/run_report.h) with a "layers" section: per layer the modelled time, kernels,
// DRAM traffic and MACs. `trace`: a Perfetto trace of the measured run ("" none).
nlohmann::json run_vision(const VisionSpec& spec, const std::string& workload, const std::string& trace);

}  // namespace spyre::tools
