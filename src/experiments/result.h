// The JSON of an experiment's result, the one document the page and the tests read:
//   {"format": "headcount.experiment.v1",
//    "experiment": {name, summary, claim, budget, metric, metric_kind, sweep_label, series_label},
//    "settings": {seeds, steps, quick, threads},  "task": Task::describe() of the first cell,
//    "cells": [{id, labels, model, cost, stats: {cell, n, mean, std, values}}],
//    "runs": [{cell, seed, config, curve: {step, loss}, validation: [{step, loss, accuracy,
//              sequence_accuracy, scored}], final: {validation_loss, validation_accuracy,
//              validation_sequence_accuracy, train_loss, scored}, cost, measures}],
//    "verdicts": [{id, claim, rule, verdict, reason, comparisons, numbers}],
//    "extra": {...the experiment's reference tables and charts...},
//    "timing": {seconds, runs: [{cell, seed, seconds, median_step_seconds, p10_step_seconds,
//               p90_step_seconds}], cells: [{id, median_step_seconds, min_step_seconds,
//               max_step_seconds}]}}
// Everything outside "timing" is a function of the command, the seeds and the thread count
// (the GEMM bands depend on the thread count), so two runs can be compared without it.
#pragma once

#include "experiments/runner.h"
#include "nlohmann/json.hpp"

namespace headcount::experiments {

inline constexpr const char* kResultFormat = "headcount.experiment.v1";

nlohmann::json result_json(const ExperimentResult& result);

// `result` without its "timing" object (what determinism is checked on).
nlohmann::json without_timing(nlohmann::json result);

}  // namespace headcount::experiments
