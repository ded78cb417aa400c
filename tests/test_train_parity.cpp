// Loss parity with PyTorch: the first 50 steps of the nanogpt-cpu preset (initial weights from
// seed 1, batches from the char-lm task, AdamW + schedule + clipping) against the float64
// PyTorch run of the same model from headcount's own initial checkpoint and dumped batches
// (tests/testdata/train_golden/nanogpt_50.json, made by scripts/make_train_golden.py from
// `headcount train --preset nanogpt-cpu --steps 0 --out CKPT` and `--steps 50 --dump-batches B`).
// The bound is the fixture's own, per step: 4x the largest deviation of three PyTorch fp32 runs
// (other summation orders, one-ulp weight perturbations) from float64 so far, + 1e-6 (the
// script's docstring derives it).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "headcount/train/presets.h"
#include "headcount/train/trainer.h"

namespace headcount::testing {
namespace {

TEST(TrainParity, FiftyStepsMatchPyTorchFloat64) {
  std::ifstream in(HEADCOUNT_TESTDATA_DIR "/train_golden/nanogpt_50.json");
  ASSERT_TRUE(in) << "missing fixture";
  const nlohmann::json fixture = nlohmann::json::parse(in);
  const auto reference = fixture.at("losses_fp64").get<std::vector<double>>();
  const auto bound = fixture.at("bound_per_step").get<std::vector<double>>();
  const std::int64_t steps = fixture.at("steps").get<std::int64_t>();
  ASSERT_EQ(static_cast<std::int64_t>(reference.size()), steps);

  train::TrainConfig config = train::preset_config(fixture.at("preset").get<std::string>());
  config.seed = fixture.at("seed").get<std::uint64_t>();
  config.steps = steps;
  config.log_every = 0;
  Context ctx({.threads = 2});
  train::Trainer trainer(ctx, config);
  // The fixture was made for this configuration and schedule.
  EXPECT_EQ(trainer.config().batch, fixture.at("batch").get<std::int64_t>());
  EXPECT_EQ(train::to_json(trainer.config().optim), fixture.at("optim"));
  double worst = 0;
  for (std::int64_t s = 0; s < steps; ++s) {
    const double loss = trainer.train_step();
    const double err = std::abs(loss - reference[static_cast<std::size_t>(s)]);
    worst = std::max(worst, err / bound[static_cast<std::size_t>(s)]);
    EXPECT_LE(err, bound[static_cast<std::size_t>(s)])
        << "step " << s << ": headcount " << loss << ", PyTorch float64 "
        << reference[static_cast<std::size_t>(s)];
  }
  RecordProperty("worst_over_bound", std::to_string(worst));
}

}  // namespace
}  // namespace headcount::testing
