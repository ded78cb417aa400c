// Named training runs, kept as data (src/train/presets.cpp: one JSON config per name, in the
// format of `headcount train --config`).
#pragma once

#include <string>
#include <vector>

#include "headcount/train/trainer.h"

namespace headcount::train {

struct PresetInfo {
  std::string name;
  std::string description;
};
std::vector<PresetInfo> presets();
// The preset's config (TrainConfig::preset set to its name); Error listing the names otherwise.
TrainConfig preset_config(const std::string& name);

}  // namespace headcount::train
