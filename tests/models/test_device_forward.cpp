// Engine::forward_device: the forward on caller-owned buffers. On the CPU (host memory, no stream) it gives the
// bytes forward(HostTensor) gives; on a GPU (skipped without one) device buffers and the caller's stream, with and
// without run.cuda_graph, give the same bytes too.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/gpu.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "common/model_path.h"

namespace {
using teengine::HostTensor;

std::string device_forward_tiny() { return te::test::model_path("tiny.yaml"); }

HostTensor device_forward_wave(int64_t tokens, int64_t hidden, float f) {
  std::vector<float> v(static_cast<size_t>(tokens * hidden));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(f * static_cast<float>(i));
  return HostTensor::from_floats({tokens, hidden}, v);
}

TEST(DeviceForward, HostBuffersOnTheCpuEqualForward) {
  auto e = teengine::Engine::from_yaml(device_forward_tiny(), {"run.mode=infer", "run.device=cpu"});
  const HostTensor x = device_forward_wave(32, e.hidden(), 0.003f);
  const HostTensor want = e.forward(x);
  EXPECT_EQ(want.dtype, e.dtype());
  std::vector<uint8_t> out(want.bytes.size(), 0xff);
  const std::vector<uint8_t> in = x.bytes;
  e.forward_device(in.data(), "f32", out.data(), 32);
  EXPECT_EQ(out, want.bytes);
  EXPECT_EQ(in, x.bytes) << "the input buffer was written";
}

TEST(DeviceForward, BadCallsAreInputErrors) {
  auto e = teengine::Engine::from_yaml(device_forward_tiny(), {"run.mode=infer", "run.device=cpu"});
  std::vector<float> in(static_cast<size_t>(4 * e.hidden())), out(in.size());
  int fake_stream = 0;
  auto input_error = [](auto&& f) {
    try {
      f();
      return false;
    } catch (const teengine::Error& err) {
      return err.is_input_error();
    }
  };
  EXPECT_TRUE(input_error([&] { e.forward_device(in.data(), "f32", out.data(), 4, &fake_stream); }));
  EXPECT_TRUE(input_error([&] { e.forward_device(nullptr, "f32", out.data(), 4); }));
  EXPECT_TRUE(input_error([&] { e.forward_device(in.data(), "i8", out.data(), 4); }));
  EXPECT_TRUE(input_error([&] { e.forward_device(in.data(), "f32", out.data(), 3); }));  // not a multiple of tp 2
  EXPECT_TRUE(input_error([&] { e.forward_device(in.data(), "f32", out.data(), 0); }));
}

// GPU: the input written on the caller's stream right before the call (no synchronisation in between), the output
// read back after; with run.cuda_graph the replayed forward gives the same bytes.
TEST(DeviceForward, DeviceBuffersAndTheCallersStreamOnAGpu) {
  TE_REQUIRE_GPU();
  for (const char* graph : {"false", "true"}) {
    SCOPED_TRACE(std::string("run.cuda_graph=") + graph);
    auto e = teengine::Engine::from_yaml(
        device_forward_tiny(), {"run.mode=infer", "run.device=cuda", "parallel.tp=1", std::string("run.cuda_graph=") + graph});
    const te::Device gpu = te::Device::cuda(0);
    const te::Stream stream = te::Stream::create(gpu);
    for (int64_t tokens : {64, 5, 64}) {  // a repeated count replays its capture
      const HostTensor x = device_forward_wave(tokens, e.hidden(), 0.002f * static_cast<float>(tokens));
      const HostTensor want = e.forward(x);
      te::Tensor in = te::Tensor::empty({tokens, e.hidden()}, te::DType::f32, gpu, stream);
      te::Tensor out = te::Tensor::zeros({tokens, e.hidden()}, te::dtype_from_name(e.dtype()).value(), gpu, stream);
      const te::Tensor host = te::Tensor::from_f32(x.to_floats(), {tokens, e.hidden()}, te::DType::f32);
      in.copy_from(host, stream);  // queued on the caller's stream, not waited for
      e.forward_device(in.data_ptr(), "f32", out.data_ptr(), tokens, stream.handle());
      const te::Tensor back = out.to(te::Device::cpu(), stream);
      stream.synchronize();
      ASSERT_EQ(static_cast<size_t>(back.nbytes()), want.bytes.size());
      EXPECT_EQ(std::memcmp(back.data_ptr(), want.bytes.data(), want.bytes.size()), 0) << tokens << " tokens";
    }
  }
}

}  // namespace
