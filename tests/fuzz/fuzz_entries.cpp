#include "tests/fuzz/fuzz_entries.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/memory_estimate.h"
#include "models/safetensors.h"
#include "models/spec.h"
#include "tests/fuzz/fuzz_lines.h"
#include "tools/teengine/output_set.h"

namespace te::fuzz {

void spec_one(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> sets;
  if (text.rfind("#set ", 0) == 0) {
    const size_t nl = text.find('\n');
    std::istringstream line(text.substr(5, nl == std::string::npos ? std::string::npos : nl - 5));
    for (std::string s; line >> s;) sets.push_back(s);
  }
  try {
    ModelSpec spec = parse_spec(text, "fuzz.yaml", sets);
    // A valid spec must list consistent parameters.
    for (const ParamSpec& p : parameter_specs(spec))
      if (p.shape.empty() || p.name.empty()) throw std::logic_error("parameter without shape or name");
    (void)describe_spec(spec);
  } catch (const InputError&) {
  }
}

void safetensors_one(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    SafetensorsReader r = SafetensorsReader::from_bytes(bytes, "fuzz.safetensors");
    std::map<std::string, Tensor> all;
    for (const auto& e : r.entries()) all[e.name] = r.read(e.name);
    // Round trip: re-encoding and re-reading gives the same tensors.
    SafetensorsReader again = SafetensorsReader::from_bytes(encode_safetensors(all, r.metadata()), "re-encoded");
    if (again.entries().size() != r.entries().size()) throw std::logic_error("round trip lost tensors");
    for (const auto& e : again.entries()) {
      Tensor a = again.read(e.name), b = all.at(e.name);
      if (a.shape() != b.shape() || a.dtype() != b.dtype() ||
          std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(a.nbytes())) != 0)
        throw std::logic_error("round trip changed tensor " + e.name);
    }
  } catch (const InputError&) {
  }
}

void safetensors_file_one(const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir("file") / "in.safetensors").string();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    const SafetensorsReader r = SafetensorsReader::open(path);
    // The header is the target; reads reopen the file each time, so only the first tensors are read (a seed of
    // thousands of tensors would make every run slow).
    size_t n = 0;
    for (const auto& e : r.entries()) {
      if (++n > 16) break;
      const Tensor t = r.read(e.name);
      if (static_cast<uint64_t>(t.nbytes()) != e.nbytes()) throw std::logic_error("read size differs: " + e.name);
      if (dtype_info(e.dtype).is_float && e.shape.size() == 2 && e.shape[0] > 0)
        (void)r.read_slice_converted(e.name, e.shape, 0, e.shape[0] - 1, 1, DType::f32);
    }
  } catch (const InputError&) {
  }
}

namespace {
constexpr const char* kTinySpec =
    "name: tiny\nmodel:\n  hidden: 256\n  layers: 2\n  dtype: bf16\n  norm: {type: layernorm, eps: 1.0e-5}\n"
    "  block:\n    - [ {layernorm_linear: {name: qkv, out: 768}}, {linear: {name: proj, out: 256}} ]\n"
    "    - [ {layernorm_mlp: {name: mlp, ffn: 1024, activation: gelu}} ]\n"
    "parallel: {tp: 2, sequence_parallel: true, comm: auto}\nprecision: {recipe: fp8_block}\n"
    "run: {mode: infer, device: auto, tokens: 256, steps: 1, seed: 1234, optimizer: {type: adamw, lr: 1.0e-3}}\n";
}  // namespace

void set_one(const uint8_t* data, size_t size) {
  try {
    const ModelSpec spec = parse_spec(kTinySpec, "tiny.yaml", lines_of(data, size));
    (void)describe_spec(spec);
    // What `teengine run` checks next: a spec too large for this machine is an input error, before allocation.
    RankPlacement cpu;
    cpu.world = spec.parallel.tp;
    check_memory_fits(spec, cpu);
  } catch (const InputError&) {
  }
}

void output_set_one(const uint8_t* data, size_t size) {
  std::vector<cli::OutputRequest> outputs;
  std::vector<std::string> inputs;
  for (const std::string& line : lines_of(data, size)) {
    const size_t sp = line.find(' ');
    const std::string flag = line.substr(0, sp), path = sp == std::string::npos ? "" : line.substr(sp + 1);
    const bool taken = std::any_of(outputs.begin(), outputs.end(), [&](const auto& o) { return o.flag == flag; });
    if (flag == "input") inputs.push_back(path);
    else if ((flag == "--output" || flag == "--json" || flag == "--save-weights") && !taken)
      outputs.push_back({flag, path, flag == "--json"});  // the CLI passes each flag once
  }
  // The paths as given: the checks only look at the file system.
  try {
    const cli::OutputSet checked(outputs, inputs);
  } catch (const InputError&) {
  }
  // Plain names inside a scratch directory: staged, then committed or dropped; nothing else may remain.
  const std::filesystem::path dir = scratch_dir("out");
  for (const auto& e : std::filesystem::directory_iterator(dir)) std::filesystem::remove_all(e.path());
  std::vector<cli::OutputRequest> plain;
  for (const auto& o : outputs)
    if (!o.path.empty() && o.path.size() <= 200 && o.path != "." && o.path != ".." &&
        o.path.find_first_of(std::string("/\0", 2)) == std::string::npos)
      plain.push_back({o.flag, (dir / o.path).string(), false});
  const bool commit = size > 0 && (data[0] & 1);
  std::set<std::string> expected;
  try {
    cli::OutputSet set(plain, {});
    for (const auto& o : plain) set.stage_text(o.flag, o.flag + "\n");
    if (commit) {
      set.commit();
      for (const auto& o : plain) expected.insert(std::filesystem::path(o.path).filename().string());
    }
  } catch (const InputError&) {
  }
  std::set<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir)) found.insert(e.path().filename().string());
  if (found != expected)
    throw std::logic_error("the scratch directory holds " + std::to_string(found.size()) + " files, expected " +
                           std::to_string(expected.size()) + " (a temporary left behind?)");
}

}  // namespace te::fuzz
