// The all-MiniLM-L6-v2 golden fixtures (tests/testdata/minilm, made by
// scripts/make_minilm_golden.py with sentence-transformers) and the model directory they need.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "headcount/encoder.h"

namespace headcount::testing {

struct GoldenCase {
  std::string source;
  std::string text;  // the bytes headcount reads (invalid UTF-8 for the "hex" cases)
  std::vector<std::int32_t> ids;
};

inline std::string minilm_testdata(const std::string& name) {
  return std::string(HEADCOUNT_TESTDATA_DIR) + "/minilm/" + name;
}

inline std::vector<GoldenCase> load_golden_cases() {
  std::ifstream in(minilm_testdata("golden.json"));
  const nlohmann::json root = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const auto& c : root.at("cases")) {
    GoldenCase g;
    g.source = c.at("source").get<std::string>();
    if (c.contains("hex")) {
      const std::string hex = c.at("hex").get<std::string>();
      for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
        g.text.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    } else {
      g.text = c.at("text").get<std::string>();
    }
    g.ids = c.at("ids").get<std::vector<std::int32_t>>();
    cases.push_back(std::move(g));
  }
  return cases;
}

// The model scripts/setup.sh unpacks; tests that need it skip (saying why) when it is absent.
inline bool minilm_present() {
  return std::filesystem::exists(std::filesystem::path(default_model_dir()) / "model.safetensors");
}
#define HEADCOUNT_REQUIRE_MINILM()                                                         \
  do {                                                                                     \
    if (!::headcount::testing::minilm_present())                                           \
      GTEST_SKIP() << "all-MiniLM-L6-v2 not found in " << ::headcount::default_model_dir() \
                   << " (run scripts/setup.sh)";                                           \
  } while (0)

}  // namespace headcount::testing
