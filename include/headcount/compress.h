// Making a BERT encoder smaller, on its weights as data:
//
//   read_encoder_weights   model directory -> config + every float tensor (PyTorch layout, f32)
//   prune_heads            removes heads physically: their rows of W_q (and, with their whole
//                          K/V group, of W_k, W_v) and of the biases, their columns of W_o
//                          ([out, in] layout; rows of x·W_o's [in, out] matrix); config.json
//                          records them in Hugging Face's "pruned_heads" convention
//   convert_kv_heads       MHA -> GQA: each layer's K/V heads pooled into G groups (mean,
//                          Procrustes-aligned mean, or key-similarity clusters)
//   repeat_kv_heads        GQA -> an equivalent MHA model (each K/V head repeated for its group),
//                          for loaders without GQA (transformers' BertModel)
//   write_encoder_dir      a model directory that headcount and transformers load: safetensors,
//                          config.json, the tokenizer and sentence-transformers files; built in
//                          a temporary directory and renamed into place whole
//
// Head indices are the original ones (0 .. num_attention_heads-1), as in "pruned_heads".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "headcount/encoder.h"
#include "headcount/model.h"
#include "headcount/tensor.h"

namespace headcount {

// An encoder's weights: the model directory's config (tokenizer, pooling, the original head
// indices of a pruned model) and the transformer definition it is a configuration of
// (model.config == bert_definition(config), kept so by every function here), whose tensors are
// named as in model.safetensors.
struct EncoderWeights {
  std::string source_dir;  // config.json's other fields and the tokenizer files come from here
  EncoderConfig config;
  model::Weights model;
};

// Every F32/F16/BF16 tensor of <dir>/model.safetensors (others, e.g. I64 position_ids, are
// dropped; the encoder recomputes them), checked against bert_weight_table.
EncoderWeights read_encoder_weights(const std::string& model_dir);

// Writes `out_dir`, which must not exist yet (or be an empty directory): model.safetensors
// (tensors in name order), config.json (the source's, with "pruned_heads" and
// "headcount_kv_heads" set from weights.config), and the source's vocab.txt, tokenizer files,
// modules.json, sentence_bert_config.json, config_sentence_transformers.json and
// 1_Pooling/config.json where present. Nothing appears under out_dir unless all of it is written.
void write_encoder_dir(const EncoderWeights& weights, const std::string& out_dir);

// The encoder these weights make, built in memory (no model directory is written): the
// tensors are copied and checked against the weight table as a loaded file's are; the
// vocabulary comes from weights.source_dir.
BertEncoder encoder_from_weights(const EncoderWeights& weights);

// remove[l]: original indices of heads to remove from layer l (each present now; at least one
// head must stay per layer). In a grouped layer the removed heads must be whole K/V groups,
// whose K/V head then goes too. Returns the pruned weights; Error names the layer and head.
EncoderWeights prune_heads(const EncoderWeights& weights,
                           const std::vector<std::vector<std::int64_t>>& remove);

// "L:H,L:H,..." -> per layer, the heads to remove (Error for anything else).
std::vector<std::vector<std::int64_t>> parse_head_list(const std::string& text,
                                                       const EncoderConfig& config);

enum class KvConvertMethod { mean, aligned, clustered };
KvConvertMethod parse_kv_convert_method(
    const std::string& name);  // "mean" | "aligned" | "clustered"
const char* kv_convert_method_name(KvConvertMethod method);

// MHA -> GQA with `kv_heads` K/V heads per layer (a divisor of every layer's head count; the
// model must be MHA). mean: contiguous groups of heads, K and V weights and biases averaged
// (Ainslie et al. 2023). aligned: before averaging, each head's key and value spaces are rotated
// by the orthogonal Procrustes solution that best maps them onto the group's first head (over
// the weights' rows); the inverse rotation goes into W_q (keys) and W_o (values), so q·k and the
// output are unchanged before pooling (computation invariance). With rotary positions the key
// rotation is one 2-D rotation per frequency plane, the rotations that commute with the positions;
// in a grouped model it acts on every query head that reads the K/V head. clustered: groups of
// equal size chosen greedily by the cosine similarity of the heads' key weights instead of by
// index; the query heads (and W_o's columns) are reordered so each group is contiguous, then
// mean-pooled.
EncoderWeights convert_kv_heads(const EncoderWeights& weights, std::int64_t kv_heads,
                                KvConvertMethod method);

// A grouped model as the MHA model it computes: every K/V head repeated for each query head of
// its group, "headcount_kv_heads" dropped.
EncoderWeights repeat_kv_heads(const EncoderWeights& weights);

// The passes themselves, on any model of the one definition (encoder, decoder, a model trained
// here), by weight role; the EncoderWeights versions above translate BERT's original head indices
// and keep its config.json fields in step. convert_kv_heads pools each layer's current K/V heads
// into `kv_heads` (a divisor of every layer's K/V head count: a grouped model can be pooled
// further with mean or aligned; clustered needs a multi-head model). remove_heads takes, per
// layer, the current positions (0 .. heads-1) of the query heads to drop. Biases are pooled,
// rotated and cut with their weights where the family has them.
namespace model {
Weights convert_kv_heads(const Weights& weights, std::int64_t kv_heads, KvConvertMethod method);
Weights repeat_kv_heads(const Weights& weights);
// The aligned method's first step alone: every K/V head turned onto its group's common frame (the
// groups convert_kv_heads(weights, kv_heads, aligned) would pool), query heads turned with it.
// The model computes what it did, up to rounding; only the pooling after it loses.
Weights align_kv_heads(const Weights& weights, std::int64_t kv_heads);
Weights remove_heads(const Weights& weights,
                     const std::vector<std::vector<std::int64_t>>& positions);
}  // namespace model

// KV-cache bytes per token of the whole model (every layer's K and V, f32).
std::int64_t kv_cache_bytes_per_token(const EncoderConfig& config);

}  // namespace headcount
