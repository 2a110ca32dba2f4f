// row_gemm_bench: the CPU forward GEMM (ops/gemm/row_gemm.h, row-independent) against one OpenBLAS sgemm of the
// same product, on the GEMM shapes of models/tiny.yaml's forward (per rank at tp 2, 256 tokens) and of a
// hidden-1024 model, plus a 16-token request. Medians of --repeats calls; one JSON object on stdout.
//   row_gemm_bench [--repeats 21]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ops/gemm/row_gemm.h"

namespace {
template <class F>
double median_ms(int repeats, F&& f) {
  f();  // warm: packing buffers, pool threads
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  int repeats = 21;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::max(1, std::atoi(argv[++i]));
  struct Shape {
    const char* what;
    int m, n, k;
  };
  const Shape shapes[] = {{"tiny qkv (per rank)", 256, 384, 256}, {"tiny proj", 256, 256, 128},
                          {"tiny fc1", 256, 512, 256},           {"tiny fc2", 256, 256, 512},
                          {"tiny fc1, 16 tokens", 16, 512, 256}, {"h1024 qkv, 512 tokens", 512, 3072, 1024},
                          {"h1024 fc1", 512, 4096, 1024},        {"h1024 fc2", 512, 1024, 4096}};
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0.f, 1.f);
  nlohmann::json rows = nlohmann::json::array();
  double blas_total = 0, row_total = 0;
  for (const Shape& s : shapes) {
    std::vector<float> x(static_cast<size_t>(s.m) * s.k), w(static_cast<size_t>(s.n) * s.k),
        y(static_cast<size_t>(s.m) * s.n);
    for (float& v : x) v = d(gen);
    for (float& v : w) v = d(gen);
    const double blas = median_ms(repeats, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.f, x.data(), s.k, w.data(), s.k, 0.f,
                  y.data(), s.n);
    });
    const double row = median_ms(repeats, [&] { te::detail::row_gemm(x.data(), w.data(), true, s.m, s.n, s.k, y.data()); });
    const double avx2 = median_ms(repeats, [&] {
      te::detail::row_gemm(x.data(), w.data(), true, s.m, s.n, s.k, y.data(), te::detail::RowGemmIsa::avx2);
    });
    blas_total += blas;
    row_total += row;
    rows.push_back({{"shape", s.what}, {"m", s.m}, {"n", s.n}, {"k", s.k}, {"openblas_ms", blas},
                    {"row_gemm_ms", row}, {"row_gemm_avx2_ms", avx2}, {"ratio", row / blas}});
    std::fprintf(stderr, "%-24s %5d x %5d x %5d  OpenBLAS %8.3f ms  row_gemm %8.3f ms (x%.2f)  avx2 %8.3f ms\n", s.what,
                 s.m, s.n, s.k, blas, row, row / blas, avx2);
  }
  std::printf("%s\n", nlohmann::json{{"repeats", repeats}, {"shapes", rows}}.dump(2).c_str());
  return 0;
}
