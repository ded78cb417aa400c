// `headcount attention --distributed heads|ring`: the command's own reading, checking and
// writing on rank 0, with the computation split over the ranks of mpirun
// (distributed/attention_distributed.cpp; built with -DHEADCOUNT_MPI=ON).
#pragma once

#include <functional>
#include <string>

#include "headcount/attention.h"
#include "headcount/attention_backward.h"

namespace headcount::cli {

// Computes params.out (and params.lse when set) of the whole problem, on rank 0, and with
// grads (not null) the gradients too (--grad-out; ring only).
using AttentionCompute = std::function<void(Kernel kernel, const AttentionParams& params,
                                            const AttentionGrads* grads, int threads)>;

// Starts MPI, then rank 0 runs `rank0` (the single-process command, which reads its inputs,
// checks them and calls the compute it is given, then writes the outputs) while every other
// rank serves that compute. Ends MPI. Errors: an Error on rank 0 before the computation
// reaches every rank (which then exit 2 without a word); mode other than heads or ring, or a
// build without MPI: Error.
// timeout_seconds: the watchdog's (headcount::distributed::Watchdog; 0: none).
void run_distributed_attention(const std::string& mode, double timeout_seconds,
                               const std::function<void(const AttentionCompute&)>& rank0);

}  // namespace headcount::cli
