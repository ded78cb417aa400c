// One transformer definition that every executor reads: a configuration (per-layer shapes and the
// kinds of norm, activation, positions and output head) and its weights as data, named by one
// table. The BERT encoder (all-MiniLM-L6-v2), the Llama decoder (SmolLM2) and the models
// headcount trains are configurations of it; the inference executor (src/models, src/layers)
// and the training executor (src/train) each lay the weights out their own way when they load
// them (packed panels; fused [in, out] Q|K|V), and pruning and K/V-head conversion
// (src/compress) act on the weights here, whatever the family.
//
//   tokens ─ embeddings: token[id] (+ position[i] if learned) (+ token_type[0]) (+ norm)
//          ─ layers × L, each with its own heads / kv_heads (pruned and GQA models are ordinary
//            configs):
//              pre-norm:   x = x + Attn(Norm1(x));  x = x + FFN(Norm2(x))
//              post-norm:  x = Norm1(x + Attn(x));   x = Norm2(x + FFN(x))
//            Attn: Q, K, V projections (rotary on Q and K if positions = rotary), scaled dot
//            product with scale 1/sqrt(head_dim) (or the config's), causal or bidirectional,
//            concat, W_O. FFN: gelu(W_up x) W_down, or swiglu: (silu(W_gate x) * W_up x) W_down.
//          ─ final norm (pre-norm models) ─ output: the hidden states, an LM head, or the token
//            embedding tied as the LM head.
//
// Every weight has a Role (what it is: the query projection of layer l, ...) and, per family, a
// name: Hugging Face's (BertModel's for bert, LlamaForCausalLM's for llama, headcount's own for
// models trained here) and, for llama, the GGUF file's. Shapes follow PyTorch's nn.Linear:
// [out, in].
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "headcount/tensor.h"

namespace headcount::model {

// Whose tensor names the weights carry (and which extras a family has: token types, biases).
enum class Family {
  bert,       // BertModel: encoder.layer.{l}.attention.self.query.weight, ...
  llama,      // LlamaForCausalLM: model.layers.{l}.self_attn.q_proj.weight, ...; GGUF names too
  headcount,  // models trained by headcount: layers.{l}.attention.q.weight, ...
};
enum class NormKind { layer_norm, rms_norm };
enum class NormPlacement { pre, post };
enum class Activation { gelu_erf, swiglu };
enum class Positions { learned, rotary };
enum class Output { hidden, lm_head, tied };

const char* family_name(Family family);  // "bert", "llama", "headcount"
const char* norm_kind_name(NormKind kind);
const char* activation_name(Activation activation);
const char* positions_name(Positions positions);
const char* output_name(Output output);

// One layer's attention shape: `heads` query heads reading `kv_heads` K/V heads (kv_heads
// divides heads; kv_heads == heads is MHA, 1 is MQA).
struct LayerShape {
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  bool operator==(const LayerShape&) const = default;
};

struct Config {
  Family family = Family::headcount;
  std::int64_t vocab = 0;
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;
  std::int64_t head_dim = 0;  // the same in every layer (pruning removes heads, not width)
  std::int64_t context = 0;   // learned: positions in the table; rotary: the trained context
  std::vector<LayerShape> layers;
  NormKind norm = NormKind::layer_norm;
  NormPlacement placement = NormPlacement::pre;
  float norm_eps = 1e-5f;
  Activation activation = Activation::gelu_erf;
  Positions positions = Positions::learned;
  float rope_base = 10000.0f;    // rotary only
  std::int64_t token_types = 0;  // BERT's token-type table rows (0: none)
  bool embedding_norm = false;   // a norm right after the embeddings (BERT)
  bool attention_bias = true;    // biases on Q, K, V and W_O
  bool ffn_bias = true;          // biases on the FFN's projections
  bool causal = true;            // decoder (true) or bidirectional encoder
  bool attention_only = false;   // no FFN sub-block (nor its norm) in any layer
  Output output = Output::lm_head;
  bool output_bias = true;     // lm_head only
  std::optional<float> scale;  // default 1 / sqrt(head_dim)

  std::int64_t layer_count() const { return static_cast<std::int64_t>(layers.size()); }
  std::int64_t heads_in(std::int64_t layer) const;
  std::int64_t kv_heads_in(std::int64_t layer) const;
  bool final_norm() const { return placement == NormPlacement::pre; }
  float attention_scale() const;
  bool uniform() const;  // every layer the same shape
  bool grouped() const;  // some layer with fewer K/V heads than query heads
  bool operator==(const Config&) const = default;
};

// Checks every field (positive sizes, kv_heads dividing heads, kinds that go together: rotary
// needs an even head_dim, swiglu has no FFN bias in llama, ...); Error names the field.
void validate(const Config& config, const std::string& where = "model config");

// What a weight is. Per-layer roles carry the layer index in WeightSpec::layer; the others -1.
enum class Role {
  token_embedding,       // [vocab, d_model]
  position_embedding,    // [context, d_model] (learned positions)
  token_type_embedding,  // [token_types, d_model]
  embedding_norm_weight,
  embedding_norm_bias,  // [d_model] (layer_norm only)
  q_weight,             // [heads * head_dim, d_model]
  q_bias,
  k_weight,  // [kv_heads * head_dim, d_model]
  k_bias,
  v_weight,
  v_bias,
  o_weight,      // [d_model, heads * head_dim]
  o_bias,        // [d_model]
  norm1_weight,  // before attention (pre) or after its residual add (post)
  norm1_bias,
  norm2_weight,  // the same around the FFN
  norm2_bias,
  ffn_gate_weight,  // [d_ff, d_model] (swiglu only)
  ffn_up_weight,    // [d_ff, d_model]
  ffn_up_bias,
  ffn_down_weight,  // [d_model, d_ff]
  ffn_down_bias,
  final_norm_weight,  // [d_model] (pre-norm models)
  final_norm_bias,
  lm_head_weight,  // [vocab, d_model] (Output::lm_head)
  lm_head_bias,    // [vocab]
};
const char* role_name(Role role);

struct WeightSpec {
  Role role;
  std::int64_t layer = -1;
  std::string name;  // the family's (Hugging Face) name
  std::vector<std::int64_t> shape;
  std::string gguf_name;  // llama only: the GGUF file's name ("blk.0.attn_q.weight"), else empty
};

// Every weight the config has, in a fixed order (embeddings, layer 0 .. L-1, final norm, head).
std::vector<WeightSpec> weight_table(const Config& config);

// The config's weights as data: one f32 tensor per WeightSpec::name, shaped as the table says.
// Executors read them by role; converters (compress.h) rewrite them and the config together.
struct Weights {
  Config config;
  std::map<std::string, Tensor> tensors;

  // The tensor of `role` (in `layer` for per-layer roles); Error names the role and the name
  // when it is missing.
  const Tensor& at(Role role, std::int64_t layer = -1) const;
  Tensor& at(Role role, std::int64_t layer = -1);
  bool has(Role role, std::int64_t layer = -1) const;
  Weights clone() const;  // a deep copy (Tensor is move-only)
};

// The family's name of one weight (the table's `name`), e.g. name_of(config, Role::q_weight, 3).
std::string name_of(const Config& config, Role role, std::int64_t layer = -1);

// Checks that `weights` holds every tensor of weight_table(weights.config) with its shape and
// dtype f32; extra tensors are allowed (and kept). Error names the tensor.
void check_weights(const Weights& weights, const std::string& where);

}  // namespace headcount::model
