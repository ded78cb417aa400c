// R-words (claims protocol, third edition, §5): "refuted" only for an effect of the wrong sign or
// one whose interval excludes the predicted size; an effect of the predicted sign that misses a
// threshold reads "not shown at this size". The cases are the committed E-C, E-F and E-G
// intervals (bench/results/, docs/what-the-split-buys.md).
#include <gtest/gtest.h>

#include <string>

#include "experiments/verdict.h"
#include "headcount/error.h"

namespace headcount::experiments {
namespace {

TEST(ExperimentVerdictWords, ReadEffectEveryBranch) {
  // E-C (d), the long budget: the slope of loss(h=4) - loss(h=1) per doubling is predicted
  // below 0 and came out at +0.010 [+0.003, +0.017]: the wrong sign.
  EXPECT_EQ(read_effect(0.0029, 0.0170, -1, 0), EffectReading::wrong_sign);
  // E-G v4 pruning: masked - full = +0.390 [+0.265, +0.515], predicted at most +0.056.
  EXPECT_EQ(read_effect(0.265, 0.515, -1, -0.056), EffectReading::excludes_prediction);
  // E-F char LM: uptrained - control A = +0.335 [+0.271, +0.399] nats/char, predicted
  // equivalent (within the 0.01 floor) or better.
  EXPECT_EQ(read_effect(0.271, 0.399, -1, -0.01), EffectReading::excludes_prediction);
  // E-F at 64 keys: uptrained - control A = -0.024 [-0.044, -0.004] accuracy, predicted within
  // the 0.02 floor or better: the interval reaches the predicted size.
  EXPECT_EQ(read_effect(-0.0443, -0.0043, +1, -0.02), EffectReading::consistent);
  // A positive effect that falls short of a predicted size of 0.056 everywhere in its interval.
  EXPECT_EQ(read_effect(0.01, 0.05, +1, 0.056), EffectReading::excludes_prediction);
  // An interval that straddles 0 says nothing about the sign.
  EXPECT_EQ(read_effect(-0.02, 0.01, +1, 0), EffectReading::consistent);
  EXPECT_THROW(read_effect(0, 1, 0, 0), Error);
  EXPECT_THROW(read_effect(1, 0, 1, 0), Error);
}

TEST(ExperimentVerdictWords, RefutedOnlyForTheWrongSignOrAnExcludedSize) {
  // The registered rule's "refuted" for an effect of the predicted sign that misses the
  // threshold (E-F at 64 keys) reads "not shown"; under the old words it stayed "refuted".
  EXPECT_EQ(r_words(Verdict::refuted, EffectReading::consistent), Verdict::not_shown);
  EXPECT_STREQ(verdict_name(r_words(Verdict::refuted, EffectReading::consistent)), "not shown");
  EXPECT_EQ(r_words(Verdict::refuted, EffectReading::wrong_sign), Verdict::refuted);
  EXPECT_EQ(r_words(Verdict::refuted, EffectReading::excludes_prediction), Verdict::refuted);
  for (const Verdict v : {Verdict::confirmed, Verdict::not_shown, Verdict::not_learned})
    for (const EffectReading e :
         {EffectReading::wrong_sign, EffectReading::excludes_prediction, EffectReading::consistent})
      EXPECT_EQ(r_words(v, e), v);
}

TEST(ExperimentVerdictWords, EveryVerdictIsWordedAtItsSizeAndBudget) {
  EXPECT_EQ(worded_verdict(Verdict::confirmed, "2,400 steps, 2 layers, d_model 64"),
            "confirmed at 2,400 steps, 2 layers, d_model 64");
  EXPECT_EQ(worded_verdict(Verdict::not_shown, "14,000 steps, MQAR 64 keys"),
            "not shown at this size (14,000 steps, MQAR 64 keys)");
  EXPECT_EQ(worded_verdict(Verdict::refuted, "2,400 to 9,600 steps"),
            "refuted at 2,400 to 9,600 steps");
  EXPECT_EQ(worded_verdict(Verdict::not_learned, "2,400 steps"), "task not learned at 2,400 steps");
  EXPECT_THROW(worded_verdict(Verdict::confirmed, ""), Error);
}

}  // namespace
}  // namespace headcount::experiments
