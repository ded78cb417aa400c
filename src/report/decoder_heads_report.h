// `headcount heads --model FILE.gguf` output: one self-contained HTML page (the role grid, the
// heatmaps of a few heads on a repeated random sequence, every head's scores) and the same
// numbers as JSON. Built from the encoder page's pieces (heads_report.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "headcount/decoder_heads.h"

namespace headcount::report {

struct DecoderHeadsReport {
  std::string model;                // the GGUF file
  std::vector<std::string> corpus;  // the text files, in order
  std::int64_t corpus_tokens = 0;   // tokens of the text (before windows are cut)
  DecoderHeadAnalysis analysis;
  AttentionMaps maps;  // every head on the first repeated sequence
  std::vector<std::pair<std::int64_t, std::int64_t>> heatmap_heads;  // (layer, head) drawn
  double circuit_seconds = 0, total_seconds = 0;  // the analysis times its own parts
  int threads = 0;
};

// The heads drawn: the `induction` heads of highest prefix-matching score, then the strongest
// previous-token head and the strongest sink (by their corpus shares), each once.
std::vector<std::pair<std::int64_t, std::int64_t>> decoder_heatmap_heads(
    const DecoderHeadAnalysis& analysis, std::size_t induction = 4);

std::string render_decoder_heads_html(const DecoderHeadsReport& report);
nlohmann::json decoder_heads_json(const DecoderHeadsReport& report);

}  // namespace headcount::report
