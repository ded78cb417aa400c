// The cost model's communication terms (cost.h, communication_cost) from their closed forms,
// on the shape: n = 131,072, 8 heads of 64, 4 ranks. The MPI tests (tests/mpi/) check
// that the splits move exactly these bytes.
#include <gtest/gtest.h>

#include "headcount/cost.h"
#include "headcount/error.h"

namespace headcount {
namespace {

TEST(CommunicationCost, RingAndHeadsBytesPerRank) {
  const CostConfig c{.d_model = 512, .heads = 8, .seq_len = 131072};
  const CommunicationCost cost = communication_cost(c, 4);
  ASSERT_TRUE(cost.ring_possible && cost.heads_possible);
  // Ring: 3 steps, each a block of 131072 / 4 rows x 8 kv heads x (64 + 64) floats = 128 MiB.
  EXPECT_EQ(cost.ring_bytes_per_step, std::int64_t{32768} * 8 * 128 * 4);
  EXPECT_EQ(cost.ring_bytes, 3 * cost.ring_bytes_per_step);
  // Backward: the 3 K/V blocks again, and 4 dK/dV blocks (the last one home).
  EXPECT_EQ(cost.ring_backward_bytes, 7 * cost.ring_bytes_per_step);
  // Heads: one all-reduce of the [n, d_model] output: 256 MiB handed over, 1.5 x that on the
  // wire from each rank in a ring all-reduce (2 (P-1) / P).
  EXPECT_EQ(cost.allreduce_bytes, std::int64_t{131072} * 512 * 4);
  EXPECT_EQ(cost.allreduce_wire_bytes, cost.allreduce_bytes / 2 * 3);
  // The core's gather: each other rank's 2 heads of out (64 values) and lse (1) per row.
  EXPECT_EQ(cost.gather_bytes, std::int64_t{131072} * 2 * 65 * 4);
  // One rank moves nothing.
  const CommunicationCost one = communication_cost(c, 1);
  EXPECT_EQ(one.ring_bytes, 0);
  EXPECT_EQ(one.ring_backward_bytes, 0);
  EXPECT_EQ(one.allreduce_wire_bytes, 0);
  EXPECT_EQ(one.gather_bytes, 0);
  EXPECT_EQ(one.block_forward_bytes, 0);
  EXPECT_EQ(one.block_train_step_bytes, 0);
}

// A whole block over heads (the encoder, training): the FFN's all-reduce beside the
// attention's, and in training the backward's two.
TEST(CommunicationCost, HeadsSplitOfAWholeBlock) {
  const CostConfig c{.d_model = 384, .heads = 12, .seq_len = 128, .batch = 4, .d_ff = 1536};
  const CommunicationCost cost = communication_cost(c, 3);
  ASSERT_TRUE(cost.block_possible);
  EXPECT_EQ(cost.block_forward_bytes, 2 * std::int64_t{4} * 128 * 384 * 4);
  EXPECT_EQ(cost.block_train_step_bytes, 2 * cost.block_forward_bytes);
  // 5 divides neither 12 heads nor 1536; 4 divides the heads but a d_ff of 1538 not.
  EXPECT_FALSE(communication_cost(c, 5).block_possible);
  CostConfig odd = c;
  odd.d_ff = 1538;
  const CommunicationCost four = communication_cost(odd, 4);
  EXPECT_TRUE(four.heads_possible);
  EXPECT_FALSE(four.block_possible);
  EXPECT_EQ(four.block_forward_bytes, 0);
}

TEST(CommunicationCost, SplitsThatCannotRunAreFlagged) {
  // 3 ranks: kv_heads 8 not divisible; 2 x 3 does not divide 131072.
  const CommunicationCost cost =
      communication_cost({.d_model = 512, .heads = 8, .seq_len = 131072}, 3);
  EXPECT_FALSE(cost.heads_possible);
  EXPECT_FALSE(cost.ring_possible);
  EXPECT_EQ(cost.ring_bytes, 0);
  EXPECT_THROW(communication_cost({.d_model = 512, .heads = 8}, 0), Error);
}

}  // namespace
}  // namespace headcount
