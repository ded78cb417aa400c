// A small seeded Llama (3 layers, 4 query heads over 2 K/V heads of 8, d_model 32, vocab 40,
// context 64, tied embedding) and a one-letter-per-token tokenizer for it: the decoder's paths
// tested without a model file (tests/test_decoder.cpp, tests/test_decoder_heads.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>

#include "headcount/bpe.h"
#include "headcount/model.h"

namespace headcount::testing {

inline model::Weights small_llama() {
  model::Weights w{.config = {.family = model::Family::llama,
                              .vocab = 40,
                              .d_model = 32,
                              .d_ff = 48,
                              .head_dim = 8,
                              .context = 64,
                              .norm = model::NormKind::rms_norm,
                              .placement = model::NormPlacement::pre,
                              .activation = model::Activation::swiglu,
                              .positions = model::Positions::rotary,
                              .rope_base = 10000.0f,
                              .attention_bias = false,
                              .ffn_bias = false,
                              .output = model::Output::tied,
                              .output_bias = false}};
  w.config.layers.assign(3, {.heads = 4, .kv_heads = 2});
  std::uint64_t seed = 20;
  for (const model::WeightSpec& spec : model::weight_table(w.config)) {
    Tensor t(DType::f32, spec.shape);
    // Norm weights 1 +- 0.2, matrices +- 0.5, each tensor from its own seed.
    const bool norm = spec.shape.size() == 1;
    std::mt19937_64 rng(seed++);
    std::uniform_real_distribution<float> dist(norm ? -0.2f : -0.5f, norm ? 0.2f : 0.5f);
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = dist(rng) + (norm ? 1.0f : 0.0f);
    w.tensors.emplace(spec.name, std::move(t));
  }
  return w;
}

// Token i is the letter 'A' + i; EOS is 1; BOS `bos` (-1: none).
inline BpeTokenizer small_tokenizer(std::int64_t vocab, std::int32_t bos = -1) {
  BpeVocabulary v;
  for (std::int64_t i = 0; i < vocab; ++i)
    v.tokens.push_back(std::string(1, static_cast<char>('A' + i)));
  v.eos_id = 1;
  v.bos_id = bos;
  return BpeTokenizer(std::move(v));
}

}  // namespace headcount::testing
