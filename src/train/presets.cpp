// The preset table: each row a name, a line for --help, and the run as JSON (the --config
// format, so a preset is also an example config). decay_steps is explicit everywhere so that
// `--steps N` shortens a run without changing its schedule (the PyTorch parity fixture runs 50
// steps of nanogpt-cpu on the 2000-step schedule).
#include "headcount/train/presets.h"

#include <nlohmann/json.hpp>

#include "headcount/error.h"

namespace headcount::train {
namespace {

struct Row {
  const char* name;
  const char* description;
  const char* config;
};

// nanogpt-cpu: nanoGPT's README CPU recipe for train_shakespeare_char (--block_size=64
// --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000
// --dropout=0.0, with config/train_shakespeare_char.py's lr 1e-3, min_lr 1e-4, beta2 0.99,
// warmup 100, and train.py's weight decay 0.1, grad_clip 1.0, eval_iters 20 -> eval_batches 20)
// on the char-lm task's default text. Differences: headcount's model has biases and an untied
// head; eval every 250 steps as the Shakespeare config.
constexpr Row kPresets[] = {
    {"nanogpt-cpu",
     "char LM, 4 layers x 4 heads, d_model 128, context 64, batch 12, 2000 steps (nanoGPT's CPU "
     "recipe)",
     R"({"task": {"name": "char-lm", "seq_len": 64},
         "model": {"layers": 4, "heads": 4, "d_model": 128, "norm": "pre", "causal": true},
         "optim": {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 100, "decay_steps": 2000, "beta1": 0.9,
                   "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0},
         "train": {"steps": 2000, "batch": 12, "seed": 1, "eval_every": 250, "eval_batches": 20,
                   "checkpoint_every": 250, "log_every": 10}})"},
    // llama-char: the char-lm task on a Llama-style model (the decoder's pieces: pre-norm RMSNorm,
    // SwiGLU, rotary positions, grouped-query attention, no biases, tied head), small enough to
    // train on 2 cores in well under a minute, so a model trained here can be run by generate,
    // heads and the other commands in CI.
    {"llama-char",
     "char LM on Llama's pieces (RMSNorm, SwiGLU, rotary, 6 heads over 2 K/V heads, no biases, "
     "tied head); 3 layers, d_model 96, context 64, 1000 steps",
     R"({"task": {"name": "char-lm", "seq_len": 64},
         "model": {"layers": 3, "heads": 6, "kv_heads": 2, "d_model": 96, "d_ff": 256, "context": 64,
                   "norm": "pre", "rms_norm": true, "rope_base": 10000, "swiglu": true, "biases": false,
                   "tied_head": true, "causal": true},
         "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 100, "decay_steps": 1000, "beta2": 0.99,
                   "weight_decay": 0.1, "grad_clip": 1.0},
         "train": {"steps": 1000, "batch": 16, "seed": 1, "eval_every": 250, "eval_batches": 10,
                   "checkpoint_every": 250, "log_every": 50}})"},
    {"copy",
     "copy/induction: 8 symbols, separator, the 8 again; 2 layers x 2 heads, d_model 32, 500 steps",
     R"({"task": {"name": "copy", "seq_len": 16, "alphabet": 8},
         "model": {"layers": 2, "heads": 2, "d_model": 32, "d_ff": 64},
         "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 20, "decay_steps": 500, "weight_decay": 0.01},
         "train": {"steps": 500, "batch": 16, "seed": 1, "eval_every": 100, "log_every": 50}})"},
    {"assoc-recall",
     "multi-query associative recall (8 key-value pairs); 2 layers x 4 heads, d_model 64, 2000 "
     "steps",
     R"({"task": {"name": "assoc-recall"},
         "model": {"layers": 2, "heads": 4, "d_model": 64},
         "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 100, "decay_steps": 2000, "weight_decay": 0.01},
         "train": {"steps": 2000, "batch": 32, "seed": 1, "eval_every": 250, "log_every": 50}})"},
    {"multi-relation",
     "a token that depends on several earlier offsets; 2 layers x 4 heads, d_model 64, 2000 steps",
     R"({"task": {"name": "multi-relation"},
         "model": {"layers": 2, "heads": 4, "d_model": 64},
         "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 100, "decay_steps": 2000, "weight_decay": 0.01},
         "train": {"steps": 2000, "batch": 32, "seed": 1, "eval_every": 250, "log_every": 50}})"},
};

}  // namespace

std::vector<PresetInfo> presets() {
  std::vector<PresetInfo> out;
  for (const Row& row : kPresets) out.push_back({.name = row.name, .description = row.description});
  return out;
}

TrainConfig preset_config(const std::string& name) {
  std::string names;
  for (const Row& row : kPresets) {
    if (name == row.name) {
      TrainConfig c = train_config_from_json(nlohmann::json::parse(row.config));
      c.preset = row.name;
      return c;
    }
    names += names.empty() ? row.name : std::string(", ") + row.name;
  }
  fail("--preset", detail::concat("expected one of ", names, ", got \"", name, "\""));
}

}  // namespace headcount::train
