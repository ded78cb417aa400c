// The training loop: a task (make_task), a Model, AdamW with nanoGPT's schedule and
// global-norm clipping, a deterministic data order and checkpoints that resume bitwise.
//
// Step s (0-based) of a run with seed S:
//   batch = task.train_batch(S, s, batch_size)           (a pure function: the data order)
//   loss  = model.forward_backward(batch)                (overwrites every gradient)
//   norm  = clip_grad_norm(params, grad_clip)
//   adamw.step(params, learning_rate(optim, s))
// Nothing else changes the state, so a run restored from the checkpoint of step N (parameters,
// both moments, the step counters, the curve) continues exactly as the uninterrupted run
// (bitwise on the same machine and thread count: the GEMM bands depend on the thread count).
// The model is initialised from S as well.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/train/checkpoint.h"
#include "headcount/train/model.h"
#include "headcount/train/optimizer.h"
#include "headcount/train/task.h"
#include "nlohmann/json.hpp"

namespace headcount::train {

struct TrainConfig {
  nlohmann::json task = nlohmann::json::object();  // make_task's config, e.g. {"name": "copy"}
  ModelConfig model;  // vocab and context 0: taken from the task; causal must suit the task
  OptimConfig optim;
  std::int64_t steps = 1000;
  std::int64_t batch = 12;
  std::uint64_t seed = 1;
  std::int64_t eval_every = 0;        // validation every N steps (0: only at the end)
  std::int64_t eval_batches = 0;      // validation batches per evaluation (0: all of the task's)
  std::int64_t checkpoint_every = 0;  // checkpoints every N steps (0: only at the end)
  std::int64_t log_every = 10;        // progress lines on stderr every N steps (0: none)
  Kernel kernel = Kernel::streaming;  // attention forward and backward
  std::string preset;                 // the preset's name when it came from one (reports only)
};

// {"model": {...}, "task": {...}, "optim": {...}, "train": {"steps", "batch", "seed",
// "eval_every", "eval_batches", "checkpoint_every", "log_every", "kernel", "preset"}}; every object
// and field optional except "task". Unknown fields are errors (named).
TrainConfig train_config_from_json(const nlohmann::json& json);
nlohmann::json to_json(const TrainConfig& config);

struct ValidationPoint {
  std::int64_t step = 0;
  TaskMetrics metrics;
};

// One replica of a data-parallel run (headcount::distributed::make_data_parallel installs it):
// this process computes rows [row_begin, row_end) of each step's global batch, with the global
// batch's scored count as the loss normaliser (ForwardOptions::loss_normalizer), so its loss and
// gradients are exactly its rows' share of the global batch's; `reduce` then sums every
// Parameter::grad and the loss over the replicas, in place, before the clipping and the AdamW
// step (which every replica runs alike). Only the writer evaluates, logs and saves.
struct Replica {
  std::int64_t row_begin = 0, row_end = 0;
  std::function<void(std::vector<Parameter>& params, double& loss)> reduce;
  bool writer = true;
};

// One rank of a heads-parallel (tensor-parallel) run (headcount::distributed::make_heads_parallel
// builds it): every rank runs every step on the whole batch with its slice of the model, whose
// partial sums (Model::set_partial_sum) make the activations and the replicated parameters'
// gradients the same on every rank; the gradient norm is the whole model's (`norm`); every
// rank evaluates (the forward is collective) and gathers the checkpoint's tensors, the writer
// alone logs and writes the files, which hold the whole model as one process would.
struct TensorParallel {
  Model slice;  // this rank's model, its partial sum set; its values are taken on installing
  // This rank's part of parameter i's whole tensor (its value and AdamW's moments alike).
  std::function<Tensor(std::size_t i, const Tensor& whole)> take;
  // Collective: parameter i's whole tensor from every rank's part (on every rank).
  std::function<Tensor(std::size_t i, const Tensor& part)> gather;
  ShardedNorm norm;
  bool writer = true;
};

class Trainer {
 public:
  // Builds the task, resolves the model config against it, initialises the model from the seed.
  Trainer(Context& ctx, const TrainConfig& config);
  // Continues from dir/checkpoint.safetensors (the config stored there; `steps` may raise the
  // run's length). Throws Error on a checkpoint of another model or task.
  static std::unique_ptr<Trainer> resume(Context& ctx, const std::string& dir,
                                         std::int64_t steps = 0);

  const TrainConfig& config() const { return config_; }
  const Task& task() const { return *task_; }
  Model& model() { return model_; }
  AdamW& optimizer() { return adam_; }
  std::int64_t step() const { return step_; }
  const std::vector<double>& losses() const { return losses_; }  // per step
  const std::vector<double>& grad_norms() const {
    return grad_norms_;
  }  // per step, before clipping
  const std::vector<ValidationPoint>& validation() const { return validation_; }

  // Makes this trainer one replica of a data-parallel run. Throws Error unless 0 <= row_begin <
  // row_end <= config().batch and reduce is set.
  void set_replica(Replica replica);
  const Replica* replica() const { return replica_ ? &*replica_ : nullptr; }

  // Makes this trainer one rank of a heads-parallel run: the model becomes plan.slice with its
  // parameters and both AdamW moments taken from the whole model's (so a resumed run splits
  // too). Throws Error when a replica is set or the slice's parameters are not the model's
  // (names, order).
  void set_tensor_parallel(TensorParallel plan);
  bool tensor_parallel() const { return tensor_parallel_.has_value(); }
  // The whole model's parameter count (a tensor-parallel rank's model() holds a slice).
  std::int64_t parameter_count() const { return whole_parameter_count_; }

  // One training step (see the file comment); returns its loss.
  double train_step();
  // Mean metrics over the validation batches (weighted by scored positions; sequences for
  // sequence_accuracy).
  TaskMetrics evaluate();
  // Runs to config().steps with validation, checkpoints to `out_dir` (empty: none) and
  // progress on stderr as configured; evaluates and checkpoints at the end as well.
  void run(const std::string& out_dir);
  // dir/checkpoint.safetensors + dir/checkpoint.json.
  void save(const std::string& dir) const;
  // The run's JSON: config, step, curve (per-step loss, lr, grad norm), validation points;
  // also "model", "optim", "steps", "seed", "preset" at the top level (what the PyTorch peer
  // scripts read).
  nlohmann::json state() const;

  // Tokens (batch · seq_len) per training step.
  std::int64_t tokens_per_step() const;

 private:
  // Views of the parameters and moments; a tensor-parallel rank gathers the whole tensors into
  // `gathered` (collective) and views those.
  std::vector<NamedTensor> checkpoint_tensors(std::vector<Tensor>* gathered = nullptr) const;
  bool writer() const;
  void record_validation();

  Context& ctx_;
  TrainConfig config_;
  std::unique_ptr<Task> task_;
  Model model_;
  AdamW adam_;
  std::int64_t step_ = 0;
  std::vector<double> losses_, grad_norms_, lrs_;
  std::vector<ValidationPoint> validation_;
  std::vector<float> logits_;
  std::optional<Replica> replica_;
  struct TensorParallelRest {  // TensorParallel less its model (moved into model_)
    std::function<Tensor(std::size_t, const Tensor&)> gather;
    ShardedNorm norm;
    bool writer = true;
  };
  std::optional<TensorParallelRest> tensor_parallel_;
  std::int64_t whole_parameter_count_ = 0;
};

// Mean metrics of `model` over the first `count` validation batches of `task` (0: all of them),
// weighted by scored positions (by sequences for sequence_accuracy). `logits` (optional) is a
// buffer reused across calls.
TaskMetrics evaluate_model(Context& ctx, Model& model, const Task& task, std::int64_t batch,
                           std::int64_t count, Kernel kernel = Kernel::streaming,
                           std::vector<float>* logits = nullptr);

// The stem of the checkpoint files in an output directory.
inline constexpr const char* kCheckpointStem = "checkpoint";

}  // namespace headcount::train
