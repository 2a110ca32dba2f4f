// The smallest embedding of the public API: one Engine, several client threads calling forward() concurrently,
// batched by the engine where that leaves every output as it is alone (Engine::set_batching).
//   embed MODEL.yaml [THREADS] [REQUESTS_PER_THREAD]
// Prints one checksum per client so runs can be compared, and exits non-zero on any error.
#include <teengine/teengine.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: embed MODEL.yaml [THREADS] [REQUESTS_PER_THREAD]\n");
    return 2;
  }
  const int threads = argc > 2 ? std::atoi(argv[2]) : 4;
  const int requests = argc > 3 ? std::atoi(argv[3]) : 2;
  try {
    auto engine = teengine::Engine::from_yaml(argv[1], {"run.mode=infer"});
    engine.set_batching({.enabled = engine.tokens_independent()});
    const int64_t tokens = engine.tokens(), hidden = engine.hidden();
    std::vector<double> sums(threads, 0.0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::vector<float> x(tokens * hidden);
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.001f * static_cast<float>(i) * (t + 1));
        for (int r = 0; r < requests; ++r) {
          auto y = engine.forward(teengine::HostTensor::from_floats({tokens, hidden}, x)).to_floats();
          double s = 0;
          for (float v : y) s += v;
          sums[t] = s;
        }
      });
    for (auto& th : pool) th.join();
    for (int t = 0; t < threads; ++t) std::printf("client %d: checksum %.6f\n", t, sums[t]);
    std::printf("teengine %s: served %d requests of [%lld, %lld]\n", teengine::version(), threads * requests,
                static_cast<long long>(tokens), static_cast<long long>(hidden));
    return 0;
  } catch (const teengine::Error& e) {
    std::fprintf(stderr, "embed: %s\n", e.what());
    return e.is_input_error() ? 2 : 1;
  }
}
