// The training loop (see include/headcount/train/trainer.h): steps, validation, progress on
// stderr, checkpoints and resume. Every value that decides the next step (parameters, both
// AdamW moments, the step counters) is in the checkpoint; the data and the learning rate are
// functions of the step, so resuming needs nothing else.
#include "headcount/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "headcount/error.h"
#include "headcount/train/checkpoint.h"

namespace headcount::train {

using detail::concat;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "headcount.train.v1";

ModelConfig model_for_task(const TrainConfig& config, const Task& task) {
  ModelConfig m = config.model;
  if (m.vocab == 0) m.vocab = task.vocab_size();
  if (m.context == 0) m.context = task.seq_len();
  HEADCOUNT_CHECK(m.vocab >= task.vocab_size(), "model.vocab",
                  concat(">= the task's vocabulary ", task.vocab_size()), m.vocab);
  HEADCOUNT_CHECK(m.context >= task.seq_len(), "model.context",
                  concat(">= the task's seq_len ", task.seq_len()), m.context);
  HEADCOUNT_CHECK(m.causal || !task.causal(), "model.causal",
                  concat("true (task ", task.name(), " needs a causal model)"), "false");
  return m;
}

std::string duration(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%llds", s);
  return text;
}

json metrics_json(const ValidationPoint& v) {
  return {{"step", v.step},
          {"loss", v.metrics.loss},
          {"accuracy", v.metrics.accuracy},
          {"sequence_accuracy", v.metrics.sequence_accuracy},
          {"scored", v.metrics.scored}};
}

}  // namespace

Trainer::Trainer(Context& ctx, const TrainConfig& config)
    : ctx_(ctx),
      config_(config),
      task_(make_task(config.task)),
      model_(model_for_task(config, *task_), config.seed),
      adam_(model_.parameters(), resolve(config.optim, config.steps)) {
  HEADCOUNT_CHECK(config.steps >= 0, "steps", ">= 0", config.steps);
  HEADCOUNT_CHECK(config.batch >= 1, "batch", ">= 1", config.batch);
  config_.model = model_.config();
  config_.optim = resolve(config.optim, config.steps);
  whole_parameter_count_ = model_.parameter_count();
}

std::int64_t Trainer::tokens_per_step() const { return config_.batch * task_->seq_len(); }

void Trainer::set_replica(Replica replica) {
  HEADCOUNT_CHECK(!tensor_parallel_, "data parallel", "a trainer that is not heads parallel",
                  "a heads-parallel rank");
  HEADCOUNT_CHECK(replica.row_begin >= 0 && replica.row_begin < replica.row_end &&
                      replica.row_end <= config_.batch,
                  "replica rows",
                  concat("a nonempty range within [0, batch = ", config_.batch, ")"),
                  concat("[", replica.row_begin, ", ", replica.row_end, ")"));
  HEADCOUNT_CHECK(static_cast<bool>(replica.reduce), "replica.reduce", "a function", "none");
  replica_ = std::move(replica);
}

namespace {

// Rows [begin, end) of a batch (a task's rows are independent sequences).
Batch batch_rows(const Batch& b, std::int64_t begin, std::int64_t end) {
  Batch out;
  out.batch = end - begin;
  out.seq_len = b.seq_len;
  const auto first = static_cast<std::ptrdiff_t>(begin * b.seq_len);
  const auto last = static_cast<std::ptrdiff_t>(end * b.seq_len);
  out.tokens.assign(b.tokens.begin() + first, b.tokens.begin() + last);
  out.targets.assign(b.targets.begin() + first, b.targets.begin() + last);
  return out;
}

}  // namespace

void Trainer::set_tensor_parallel(TensorParallel plan) {
  HEADCOUNT_CHECK(!replica_, "tensor parallel", "a trainer that is not a data-parallel replica",
                  "a replica");
  HEADCOUNT_CHECK(plan.take && plan.gather && plan.norm.sum_over_ranks, "tensor parallel",
                  "take, gather and the norm's sum", "a missing function");
  std::vector<Parameter>& whole = model_.parameters();
  std::vector<Parameter>& part = plan.slice.parameters();
  HEADCOUNT_CHECK(part.size() == whole.size() && plan.norm.sharded.size() == whole.size(),
                  "tensor parallel slice", concat(whole.size(), " parameters"), part.size());
  AdamW adam(part, config_.optim);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    HEADCOUNT_CHECK(part[i].name == whole[i].name, concat("tensor parallel parameter ", i),
                    whole[i].name, part[i].name);
    auto take = [&](const Tensor& from, Tensor& to) {
      const Tensor t = plan.take(i, from);
      HEADCOUNT_CHECK(t.shape() == to.shape(), concat("the part of ", whole[i].name),
                      shape_string(to.shape()), shape_string(t.shape()));
      std::copy_n(t.data<const float>(), t.numel(), to.data<float>());
    };
    take(whole[i].value, part[i].value);
    take(adam_.first_moments()[i], adam.first_moments()[i]);
    take(adam_.second_moments()[i], adam.second_moments()[i]);
  }
  adam.set_steps_taken(adam_.steps_taken());
  model_ = std::move(plan.slice);
  adam_ = std::move(adam);
  tensor_parallel_ = TensorParallelRest{
      .gather = std::move(plan.gather), .norm = std::move(plan.norm), .writer = plan.writer};
}

bool Trainer::writer() const {
  if (replica_) return replica_->writer;
  if (tensor_parallel_) return tensor_parallel_->writer;
  return true;
}

double Trainer::train_step() {
  const Batch batch = task_->train_batch(config_.seed, step_, config_.batch);
  StepResult result;
  if (replica_) {
    // This replica's rows, scaled by the global batch's count: each row's dlogits, and so every
    // activation gradient of the row, are bitwise the one process's (the packed GEMM and the
    // attention kernels compute a row the same whatever the other rows); `reduce` sums the
    // replicas' parameter gradients and losses.
    std::int64_t scored = 0;
    for (std::int32_t t : batch.targets) scored += t >= 0 ? 1 : 0;
    result =
        model_.forward_backward(ctx_, batch_rows(batch, replica_->row_begin, replica_->row_end),
                                {.kernel = config_.kernel, .loss_normalizer = scored});
    replica_->reduce(model_.parameters(), result.loss);
  } else {
    result = model_.forward_backward(ctx_, batch, {.kernel = config_.kernel});
  }
  HEADCOUNT_CHECK(std::isfinite(result.loss), "loss",
                  concat("a finite value at step ", step_, " (the run diverged)"), result.loss);
  const double norm = clip_grad_norm(model_.parameters(), config_.optim.grad_clip,
                                     tensor_parallel_ ? &tensor_parallel_->norm : nullptr);
  const double lr = learning_rate(config_.optim, step_);
  adam_.step(ctx_, model_.parameters(), lr);
  losses_.push_back(result.loss);
  grad_norms_.push_back(norm);
  lrs_.push_back(lr);
  ++step_;
  return result.loss;
}

TaskMetrics evaluate_model(Context& ctx, Model& model, const Task& task, std::int64_t batch,
                           std::int64_t count, Kernel kernel, std::vector<float>* logits_buffer) {
  const std::int64_t available = task.validation_batches(batch);
  count = count > 0 ? std::min(count, available) : available;
  std::vector<float> local;
  std::vector<float>& logits = logits_buffer ? *logits_buffer : local;
  TaskMetrics total;
  double loss = 0, accuracy = 0, sequences_right = 0;
  std::int64_t sequences = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const Batch b = task.validation_batch(i, batch);
    logits.resize(static_cast<std::size_t>(b.batch * b.seq_len * model.config().vocab));
    model.forward(ctx, b, logits.data(), {.kernel = kernel});
    const TaskMetrics m = score_logits(b, logits.data(), model.config().vocab);
    loss += m.loss * static_cast<double>(m.scored);
    accuracy += m.accuracy * static_cast<double>(m.scored);
    sequences_right += m.sequence_accuracy * static_cast<double>(b.batch);
    sequences += b.batch;
    total.scored += m.scored;
  }
  if (total.scored > 0) {
    total.loss = loss / static_cast<double>(total.scored);
    total.accuracy = accuracy / static_cast<double>(total.scored);
  }
  if (sequences > 0) total.sequence_accuracy = sequences_right / static_cast<double>(sequences);
  return total;
}

TaskMetrics Trainer::evaluate() {
  return evaluate_model(ctx_, model_, *task_, config_.batch, config_.eval_batches, config_.kernel,
                        &logits_);
}

void Trainer::record_validation() {
  if (!validation_.empty() && validation_.back().step == step_) return;
  validation_.push_back({.step = step_, .metrics = evaluate()});
}

void Trainer::run(const std::string& out_dir) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto window_start = start;
  std::int64_t window_steps = 0;
  const std::int64_t first = step_;
  // A data-parallel replica other than the writer only trains: its parameters are the writer's.
  // Every tensor-parallel rank evaluates and gathers checkpoints (both are collective); the
  // writer alone logs and writes.
  const bool writer = this->writer();
  const bool follows = writer || tensor_parallel_;
  while (step_ < config_.steps) {
    const double loss = train_step();
    ++window_steps;
    if (!follows) continue;
    if (config_.eval_every > 0 && step_ % config_.eval_every == 0 && step_ < config_.steps) {
      record_validation();
      const TaskMetrics& m = validation_.back().metrics;
      if (writer && config_.log_every > 0)
        std::fprintf(stderr,
                     "step %lld  validation loss %.4f  accuracy %.4f  sequence accuracy %.4f\n",
                     static_cast<long long>(step_), m.loss, m.accuracy, m.sequence_accuracy);
    }
    if (!out_dir.empty() && config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0 &&
        step_ < config_.steps)
      save(out_dir);
    if (writer && config_.log_every > 0 &&
        (step_ % config_.log_every == 0 || step_ == config_.steps)) {
      const auto now = Clock::now();
      const double window = std::chrono::duration<double>(now - window_start).count();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double per_step = elapsed / static_cast<double>(step_ - first);
      std::fprintf(stderr, "step %lld/%lld  loss %.4f  lr %.3e  %.0f tokens/s  %s left\n",
                   static_cast<long long>(step_), static_cast<long long>(config_.steps), loss,
                   lrs_.back(),
                   static_cast<double>(window_steps * tokens_per_step()) / std::max(window, 1e-9),
                   duration(per_step * static_cast<double>(config_.steps - step_)).c_str());
      window_start = now;
      window_steps = 0;
    }
  }
  if (!follows) return;
  record_validation();
  if (!out_dir.empty()) save(out_dir);
}

std::vector<NamedTensor> Trainer::checkpoint_tensors(std::vector<Tensor>* gathered) const {
  std::vector<NamedTensor> out;
  const std::vector<Parameter>& params = model_.parameters();
  const std::size_t n = params.size();
  if (tensor_parallel_) {
    HEADCOUNT_CHECK(gathered != nullptr, "checkpoint_tensors", "a buffer for the gathered tensors",
                    "none");
    gathered->clear();
    gathered->reserve(3 * n);
    for (std::size_t i = 0; i < n; ++i)
      gathered->push_back(tensor_parallel_->gather(i, params[i].value));
    for (std::size_t i = 0; i < n; ++i)
      gathered->push_back(tensor_parallel_->gather(i, adam_.first_moments()[i]));
    for (std::size_t i = 0; i < n; ++i)
      gathered->push_back(tensor_parallel_->gather(i, adam_.second_moments()[i]));
  }
  auto view = [&](std::size_t k, const Tensor& own) {
    return tensor_parallel_ ? (*gathered)[k].view() : own.view();
  };
  for (std::size_t i = 0; i < n; ++i)
    out.push_back({.name = params[i].name, .view = view(i, params[i].value)});
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(
        {.name = "adamw.m." + params[i].name, .view = view(n + i, adam_.first_moments()[i])});
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(
        {.name = "adamw.v." + params[i].name, .view = view(2 * n + i, adam_.second_moments()[i])});
  return out;
}

json Trainer::state() const {
  json validation = json::array();
  for (const ValidationPoint& v : validation_) validation.push_back(metrics_json(v));
  return {{"format", kFormat},
          {"config", to_json(config_)},
          {"model", to_json(config_.model)},
          {"optim", to_json(config_.optim)},
          {"steps", config_.steps},
          {"seed", config_.seed},
          {"preset", config_.preset},
          {"step", step_},
          {"adamw_steps", adam_.steps_taken()},
          {"parameters", whole_parameter_count_},
          {"tokens_per_step", tokens_per_step()},
          {"curve", {{"loss", losses_}, {"lr", lrs_}, {"grad_norm", grad_norms_}}},
          {"validation", validation}};
}

void Trainer::save(const std::string& dir) const {
  std::vector<Tensor> gathered;
  const std::vector<NamedTensor> tensors = checkpoint_tensors(&gathered);  // collective if split
  if (writer()) save_checkpoint(dir, kCheckpointStem, tensors, state());
}

std::unique_ptr<Trainer> Trainer::resume(Context& ctx, const std::string& dir, std::int64_t steps) {
  const LoadedCheckpoint loaded = load_checkpoint(dir, kCheckpointStem);
  const json& state = loaded.state;
  const std::string path = checkpoint_tensors_path(dir, kCheckpointStem);
  HEADCOUNT_CHECK(state.is_object() && state.value("format", "") == kFormat, path,
                  concat("a training checkpoint (format ", kFormat, ")"),
                  state.is_object() ? state.value("format", "none") : "none");
  TrainConfig config = train_config_from_json(state.at("config"));
  if (steps > 0) config.steps = steps;
  auto trainer = std::make_unique<Trainer>(ctx, config);
  const std::int64_t step = state.at("step").get<std::int64_t>();
  HEADCOUNT_CHECK(step >= 0 && step <= config.steps, "steps",
                  concat(">= the checkpoint's step ", step), config.steps);
  restore_tensors(loaded, trainer->checkpoint_tensors());
  trainer->step_ = step;
  trainer->adam_.set_steps_taken(state.at("adamw_steps").get<std::int64_t>());
  const json& curve = state.at("curve");
  trainer->losses_ = curve.at("loss").get<std::vector<double>>();
  trainer->lrs_ = curve.at("lr").get<std::vector<double>>();
  trainer->grad_norms_ = curve.at("grad_norm").get<std::vector<double>>();
  for (const json& v : state.at("validation"))
    trainer->validation_.push_back(
        {.step = v.at("step").get<std::int64_t>(),
         .metrics = {.loss = v.at("loss").get<double>(),
                     .accuracy = v.at("accuracy").get<double>(),
                     .sequence_accuracy = v.at("sequence_accuracy").get<double>(),
                     .scored = v.at("scored").get<std::int64_t>()}});
  return trainer;
}

}  // namespace headcount::train
