// `headcount embed --distributed` and `headcount train --parallel data` under mpirun
// (distributed/embed_distributed.cpp, distributed/train_distributed.cpp; built with
// -DHEADCOUNT_MPI=ON). Without MPI each is an Error saying so.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "headcount/compress.h"
#include "headcount/context.h"
#include "headcount/encoder.h"
#include "headcount/tensor.h"
#include "headcount/train/trainer.h"

namespace headcount::cli {

struct DistributedEmbedJob {
  // Rank 0: checks the options and reads the sentences (may throw Error).
  std::function<std::vector<std::string>()> read;
  // Every rank: loads the encoder (may throw Error).
  std::function<BertEncoder()> load;
  // "sentences" (each rank embeds its shard) or "heads" (each rank holds a slice of every
  // layer's heads and FFN; load_weights then reads the whole fp32 weights it is cut from).
  std::string split = "sentences";
  std::function<EncoderWeights()> load_weights;
  EmbedOptions options;  // progress: rank 0's shard
  int threads = 1;
  double timeout_seconds = 600;
  // Rank 0: writes the embeddings [sentences, dim] of the sentences, in input order.
  std::function<void(const std::vector<std::string>&, const Tensor&)> write;
};
// The sentences split over the ranks (headcount::distributed::embed_sentences) or the heads
// (heads_parallel_encoder); rank 0 reads and writes, the others touch no file. Errors before the
// work: every rank exits 2, rank 0 printing the line.
void run_distributed_embed(const DistributedEmbedJob& job);

struct DistributedTrainJob {
  std::string parallel;  // "data" or "heads"
  // Every rank: builds the trainer (the same run on every rank; may throw Error).
  std::function<std::unique_ptr<train::Trainer>(Context&)> make;
  int threads = 1;
  double timeout_seconds = 600;
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  // Rank 0: runs the trainer (writing checkpoints) and reports, as the one-process command.
  std::function<void(train::Trainer&)> run_writer;
  std::string out;  // the checkpoint directory: heads-parallel ranks all gather into it
};
// Data-parallel (headcount::distributed::make_data_parallel) or heads-parallel
// (make_heads_parallel) training over the ranks.
void run_distributed_train(const DistributedTrainJob& job);

}  // namespace headcount::cli
