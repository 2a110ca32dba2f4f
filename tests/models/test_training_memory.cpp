// What a training step holds at its peak (one layernorm_mlp block whose FFN activations dominate, tp 1, CPU): the
// planned arena lets the row-parallel layer's dgrad output take the bytes of its input once wgrad has read it, and
// the activation's gradient overwrite its output gradient in place; holding either one node longer costs one more
// [tokens, ffn] tensor (measured as the planned arena plus the allocator's high-water mark over the second step,
// when gradients and optimizer state exist). And the step as a whole stays within what --explain plans for it.
#include <gtest/gtest.h>

#include "comm/local_communicator.h"
#include "engine/allocator.h"
#include "models/rank_group.h"
#include "models/rank_model.h"
#include "models/spec.h"
#include "models/train_graph.h"
#include "tests/models/test_spec_yaml.h"

namespace te {
namespace {

constexpr int64_t kMemTokens = 256, kMemHidden = 64, kMemFfn = 4096;

std::string memory_model(const std::string& recipe) {
  return test::SmallSpec{.name = "memory", .hidden = kMemHidden, .ffn = kMemFfn, .linear_branch = false,
                         .sp = false, .recipe = recipe, .mode = "train", .device = "cpu", .tokens = kMemTokens,
                         .seed = 5}
      .yaml();
}

// Peak bytes above the step's starting point, over the second training step.
int64_t second_step_peak(const std::string& recipe) {
  RankGroup g(parse_spec(memory_model(recipe), "<test>"), Device::cpu());
  Tensor x = Tensor::empty({kMemTokens, kMemHidden}, DType::bf16), t = Tensor::empty({kMemTokens, kMemHidden}, DType::bf16);
  x.fill_normal(1);
  t.fill_normal(2);
  TrainGraph step(*g.models[0], kMemTokens, t.dtype());
  step.train_step(x, t, 1, 1e-3);
  const int64_t start = memory_stats(Device::cpu()).current_bytes;
  reset_peak_memory(Device::cpu());
  step.train_step(x, t, 2, 1e-3);
  // The planned arena (allocated with the plan, before `start`) holds the step's high-precision intermediates.
  return memory_stats(Device::cpu()).peak_bytes - start + step.plan().arena_bytes;
}

TEST(TrainingMemory, RowParallelBackwardFreesItsInputBeforeDgrad) {
  const int64_t act = kMemTokens * kMemFfn * 2;  // one [tokens, ffn] bf16 tensor
  const int64_t peak = second_step_peak("none");
  // At the row-parallel dgrad: GELU's input (kept for GELU's backward), dx, and the CPU GEMM's result before it is
  // copied into dx (bf16, one more activation): 3. Keeping FC2's saved input until after dgrad makes it 4. (Under a
  // quantized recipe the CPU GEMM's f32 operand copies set the peak elsewhere, so only `none` tells here; the GPU
  // figures in docs/PERFORMANCE.md cover the rest.)
  EXPECT_GE(peak, 2 * act) << "the step held less than two FFN activations: measure again";
  EXPECT_LE(peak, 3 * act + act / 2) << "peak " << peak << " bytes = " << double(peak) / act << " FFN activations";
}

// The second training step against --explain's planned step peak: what the model holds by kind, the planned arena,
// the values the kernels hold outside it at their peak (models/held_values.h) and the step's input and target.
// Beyond that the CPU GEMM (ops/gemm/gemm_ref.cpp) materialises its result in the output dtype (bf16 activations,
// f32 weight gradients) and, under a quantized recipe, each quantized operand dequantized to f32, one at a time.
void expect_step_within_plan(const std::string& recipe) {
  constexpr int64_t kTokens = 256, kHidden = 128, kFfn = 2048;
  RankGroup g(parse_spec(test::SmallSpec{.name = "plan", .hidden = kHidden, .ffn = kFfn, .linear_branch = false,
                                         .sp = false, .recipe = recipe, .mode = "train", .device = "cpu",
                                         .tokens = kTokens, .seed = 5}
                             .yaml(),
                         "<test>"),
              Device::cpu());
  const int64_t outside_before = memory_stats(Device::cpu()).current_bytes;  // the model's memory
  Tensor x = Tensor::empty({kTokens, kHidden}, DType::bf16), t = Tensor::empty({kTokens, kHidden}, DType::bf16);
  x.fill_normal(1);
  t.fill_normal(2);
  TrainGraph step(*g.models[0], kTokens, t.dtype());
  step.train_step(x, t, 1, 1e-3);
  const RankModel::Memory mem = g.models[0]->memory();
  const int64_t model = mem.weights + mem.weight_images + mem.master_weights + mem.gradients + mem.optimizer_state;
  const int64_t planned = model + step.plan().arena_bytes + step.held_peak_bytes() + x.nbytes() + t.nbytes();
  EXPECT_LE(outside_before, model) << "the model holds memory its account leaves out";
  reset_peak_memory(Device::cpu());
  const int64_t base = memory_stats(Device::cpu()).current_bytes;
  step.train_step(x, t, 2, 1e-3);
  const int64_t peak = memory_stats(Device::cpu()).peak_bytes;
  const int64_t staging =
      recipe == "none" ? std::max(2 * kTokens * kFfn, 4 * kFfn * kHidden) : 4 * kFfn * std::max(kTokens, kHidden);
  const int64_t slack = 16 << 10;  // norm statistics, amaxes and scale-history updates of a few KiB
  EXPECT_LE(peak, planned + staging + slack)
      << recipe << ": peak " << peak << " bytes, planned " << planned << " (" << step.held_peak_bytes()
      << " held outside the arena) + CPU GEMM staging " << staging;
  // Between steps only the model, the arena and the bound tensors remain: nothing held carries over.
  EXPECT_LE(base, model + step.plan().arena_bytes + x.nbytes() + t.nbytes() + slack) << recipe;
  // The account is not padded either: the step reaches the held peak.
  EXPECT_GE(peak, planned - slack) << recipe << ": peak " << peak << " bytes, planned " << planned;
}

TEST(TrainingMemory, StepPeakWithinPlanFp8Block) { expect_step_within_plan("fp8_block"); }
TEST(TrainingMemory, StepPeakWithinPlanNone) { expect_step_within_plan("none"); }

}  // namespace
}  // namespace te
