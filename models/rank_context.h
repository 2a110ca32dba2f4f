// What one tensor-parallel rank computes with: its communicator, device, stream, GEMM state and the run's
// precision. Passed explicitly to every layer (no hidden globals).
#pragma once
#include "comm/communicator.h"
#include "engine/stream.h"
#include "models/recipe.h"
#include "ops/gemm/gemm.h"

namespace te {

struct RankContext {
  Communicator* comm = nullptr;    // the tensor-parallel group (size 1 when tp = 1)
  bool sequence_parallel = false;  // activations between blocks hold T/W tokens per rank
  Device device;
  Stream stream;
  DType dtype = DType::bf16;       // parameters and activations
  RecipeConfigs recipe;
  bool training = false;           // keep what backward needs; quantize weights for both usages
  // Training: keep each weight's model-dtype copy after quantizing it (by default it goes until the optimizer writes
  // the next one). A captured step (models/train_graph.h cuda_graph) reads and writes it at one address every replay.
  bool keep_weight_values = false;
  // Where a GEMM would dequantize a quantized operand (ops/gemm: gemm_image_spec), the pass that quantizes it also
  // writes its exact image and the GEMM reads that: for the weights (made once per load or optimizer step) and for
  // the activations and gradients (run.weight_images / run.activation_images).
  bool weight_images = true;
  bool activation_images = true;
  std::unique_ptr<GemmContext> gemm;

  int rank() const { return comm->rank(); }
  int world() const { return comm->size(); }
  bool gathers() const { return sequence_parallel && world() > 1; }
};

// A parameter shard on a rank: fp32 master, the model-dtype copy the kernels read, its gradient (fp32) and the
// optimizer state.
struct RankParam {
  const ParamSpec* spec = nullptr;
  Tensor master;  // f32, local shape (training only: inference keeps just `value`)
  Tensor value;   // model dtype, local shape; undefined when only the quantized weight stays on the device
  Tensor host_value;  // then the model-dtype copy in host memory (saving reads it)
  Tensor grad;    // f32, local shape (training)
  Tensor state1, state2;  // momentum / Adam moments (training)
  bool grad_all_reduce = false;  // replicated over the group but computed from local tokens (SP): sum over ranks
  // grad still holds an earlier step's values: the step's first contribution writes it (models/param_grad.h).
  bool grad_stale = false;
};

}  // namespace te
