// The training executor over the one transformer definition (model.h): which configurations it
// trains, and its weights read from and written to model::Weights by role.
//
// The executor keeps its own layout (train/model.h): linear weights [in, out], Q|K|V fused into
// one w_qkv per layer. Reading a definition transposes each [out, in] weight into it; writing
// transposes back, so read then write gives every bit back. It trains LayerNorm models with
// learned positions, erf GELU and biases (the headcount family, and the layers of the bert
// family, whose embeddings stay outside: WeightParts::layers), and the llama family (RMSNorm,
// rotary positions, SwiGLU, no biases, a tied or untied LM head).
#pragma once

#include "headcount/model.h"
#include "headcount/train/model.h"

namespace headcount::train {

enum class WeightParts {
  all,     // embeddings, layers, final norm and LM head
  layers,  // the layers alone (a model built with vocab 1: the embeddings are computed outside)
};

// A model trained here, as a definition (family headcount).
model::Config definition(const ModelConfig& config);

// The executor's config for a definition: per-layer head counts where the layers differ; with
// WeightParts::layers, vocab 1 and no LM head of consequence. Error (naming the field) for what
// the executor does not implement: biases on some projections only, a SwiGLU FFN with biases;
// with WeightParts::all also token types, an embedding norm or no LM head.
ModelConfig model_config(const model::Config& definition, WeightParts parts = WeightParts::all);

// Copies the definition's weights into `model` (shaped by model_config(weights.config, parts)).
void read_weights(Model& model, const model::Weights& weights,
                  WeightParts parts = WeightParts::all);

// Writes the model's weights into `weights` (whose config must have the model's shape); with
// WeightParts::layers the other tensors of `weights` are left as they are.
void write_weights(const Model& model, model::Weights& weights,
                   WeightParts parts = WeightParts::all);

// The whole model as a definition of family headcount, with its weights.
model::Weights to_weights(const Model& model);

// A model from a definition's weights (model_config(weights.config, parts), then read_weights),
// with its own buffers.
Model from_weights(const model::Weights& weights, WeightParts parts = WeightParts::all);

}  // namespace headcount::train
