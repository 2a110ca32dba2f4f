// teengine run MODEL.yaml: inference or training of a model spec, with the JSON metrics contract.
// Under a launcher every process runs this same code as one rank: every rank reads the input (or makes the same
// seeded one) and takes its own tokens; rank 0 alone prints the summary and writes --output, --json and
// --save-weights; the other ranks print only warnings and errors (prefixed with their rank).
#include <teengine/teengine.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/printable.h"
#include "engine/tensor.h"
#include "models/memory_estimate.h"
#include "models/rank_placement.h"
#include "models/safetensors.h"
#include "models/spec.h"
#include "tools/teengine/commands.h"
#include "tools/teengine/output_set.h"
#include "tools/teengine/checkpoint_dir.h"
#include "tools/teengine/train_inputs.h"
#include "tools/teengine/train_loop.h"

namespace te::cli {
namespace {

struct RunOptions {
  std::string model;
  std::vector<std::string> sets;
  std::string input, output, save_weights, json, checkpoint_dir, resume;
  bool explain = false;
  bool keep_going = false;  // continue past a non-finite loss
};

teengine::HostTensor to_host(const Tensor& t) {
  Tensor f = Tensor::from_f32(t.to_f32_vector(), t.shape(), DType::f32);
  teengine::HostTensor h;
  h.shape.assign(f.shape().begin(), f.shape().end());
  h.dtype = "f32";
  h.bytes.resize(static_cast<size_t>(f.nbytes()));
  std::memcpy(h.bytes.data(), f.data_ptr(), h.bytes.size());
  return h;
}

Tensor from_host(const teengine::HostTensor& h) {
  auto dt = dtype_from_name(h.dtype);
  Tensor t = Tensor::empty(Shape(h.shape.begin(), h.shape.end()), dt.value_or(DType::f32));
  std::memcpy(t.data_ptr(), h.bytes.data(), h.bytes.size());
  return t;
}

// Collective under a launcher: every rank calls save_weights; rank 0 writes, into the set's temporary file.
void save_weights(teengine::Engine& engine, OutputSet& outputs, const std::string& path, bool root) {
  if (root)
    outputs.stage("--save-weights", [&](const std::string& tmp) { engine.save_weights(tmp); });
  else
    engine.save_weights(path);  // rank 0 alone writes files
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int run(const RunOptions& o) {
  ModelSpec spec = load_spec_file(o.model, o.sets);
  const int64_t tokens = spec.run.tokens, hidden = spec.model.hidden;
  const bool train = spec.run.mode == RunMode::train;
  if (!train && (!o.checkpoint_dir.empty() || !o.resume.empty()))
    TE_INPUT_ERROR("--checkpoint-dir and --resume apply to training", "set run.mode: train (--set run.mode=train)");
  const TrainOptions to{o.input, o.checkpoint_dir, o.resume, o.keep_going};

  // Every output path checked before any work, against every file the run reads; written as one set at the end
  // (tools/teengine/output_set.h). Checkpoints are checked with the training inputs, below.
  std::vector<std::string> inputs = {o.model, spec.weights_path, o.input};
  const std::string resume = train && !o.resume.empty() ? resolve_resume(o.resume) : "";
  if (train) {
    const std::vector<std::string> data = training_input_files(spec, to);
    inputs.insert(inputs.end(), data.begin(), data.end());
    if (!resume.empty()) inputs.push_back(resume);
  }
  const std::vector<OutputRequest> requests = {
      {"--output", o.output}, {"--save-weights", o.save_weights}, {"--json", o.json, true}};
  OutputSet outputs(requests, inputs);
  OutputSet::install_signal_cleanup();
  // The engine checks this too, but the inputs below are read and allocated first: a run that cannot fit is refused
  // here, naming the fields, before anything is allocated (models/memory_estimate.h).
  check_memory_fits(spec, place_ranks(spec));

  // Inference input: from --input, else seeded: x ~ N(0, 1). Training data, eval set, the checkpoint to resume and
  // the checkpoint paths: opened and checked here too, before the engine allocates anything (train_inputs.h).
  Tensor input;
  std::optional<TrainInputs> train_in;
  if (train) {
    train_in.emplace(open_train_inputs(spec, to, resume, inputs, requests));
  } else if (!o.input.empty()) {
    input = SafetensorsReader::open(o.input).read_converted("input", {tokens, hidden}, DType::f32);
  } else {
    input = Tensor::empty({tokens, hidden}, DType::f32);
    input.fill_normal(spec.run.seed ^ 0x1A2B3C4Dull);
  }

  teengine::Engine engine = teengine::Engine::from_yaml(o.model, o.sets);
  const bool root = engine.rank() == 0;
  if (o.explain && root) std::printf("%s\n", engine.explain().c_str());
  // Staged once where the ranks compute (model dtype, each rank's rows): the steps then move no data to or from
  // the host, and the output comes back once, below.
  teengine::StagedTensor x, out;
  if (train) {
    const TrainLoopResult t = train_loop(engine, spec, *train_in, o.keep_going);
    x = t.input;
    if (t.stopped) {
      // The engine skipped this step's update: what --save-weights writes is the last good step.
      if (!o.save_weights.empty()) {
        OutputSet weights({{"--save-weights", o.save_weights}}, inputs);
        save_weights(engine, weights, o.save_weights, root);
        if (root) weights.commit();
      }
      TE_THROW("loss is not finite at step " << t.step << " (" << t.loss << "); the update was skipped"
                                             << (o.save_weights.empty() ? "" : ", weights of step " +
                                                                                   std::to_string(t.step - 1) +
                                                                                   " saved to " +
                                                                                   printable_path(o.save_weights)),
               "lower run.optimizer.lr, compare with precision.recipe=none, or pass --keep-going");
    }
  } else {
    x = engine.stage(to_host(input));
    input = Tensor();
    for (int64_t s = 1; s <= spec.run.steps; ++s) out = engine.forward(x);
  }
  if (train && !o.output.empty()) {
    spec.run.mode = RunMode::infer;  // the output of the trained weights
    out = engine.forward(x);
  }
  nlohmann::json metrics = nlohmann::json::parse(engine.metrics_json());
  // Collective under a launcher: every rank takes part, rank 0 writes.
  const teengine::HostTensor host_out = out.defined() ? engine.to_host(out) : teengine::HostTensor();
  if (!o.save_weights.empty()) save_weights(engine, outputs, o.save_weights, root);
  if (!root) return 0;
  const std::vector<double> wall = metrics["step_ms"].get<std::vector<double>>(),
                            device = metrics["device_ms"].get<std::vector<double>>();
  std::printf(
      "%s: %lld tokens × %lld hidden, tp %d (%s), recipe %s, %s — %.2f ms/step wall, %.2f ms/step device "
      "(medians of %zu), %.0f tokens/s\n",
      printable(spec.name).c_str(), static_cast<long long>(tokens), static_cast<long long>(hidden), spec.parallel.tp,
      metrics["comm_backend"].get<std::string>().c_str(), std::string(recipe_name(spec.precision.recipe)).c_str(),
      metrics["device"].get<std::string>().c_str(), median(wall), median(device), wall.size(),
      metrics["tokens_per_s"].get<double>());
  if (!train) {
    std::vector<float> v = host_out.to_floats();
    double sum = 0, sq = 0;
    for (float f : v) {
      sum += f;
      sq += static_cast<double>(f) * f;
    }
    std::printf("output: mean %.6f, rms %.6f\n", v.empty() ? 0.0 : sum / v.size(),
                v.empty() ? 0.0 : std::sqrt(sq / v.size()));
  }
  const auto& g = metrics["comm"]["gather"];
  std::printf("gathers: quantized %lld (%lld bytes), fallback %lld (%lld bytes)\n",
              static_cast<long long>(g["quantized"]["calls"].get<int64_t>()),
              static_cast<long long>(g["quantized"]["bytes"].get<int64_t>()),
              static_cast<long long>(g["fallback"]["calls"].get<int64_t>()),
              static_cast<long long>(g["fallback"]["bytes"].get<int64_t>()));
  const auto& at_peak = metrics["memory_at_peak"];  // TEENGINE_MEMORY_TRACE=1: who held the device's peak
  for (size_t i = 0; i < at_peak.size() && i < 16; ++i)
    std::printf("memory at the peak: %9.2f MiB in %3lld block(s) allocated by %s\n",
                static_cast<double>(at_peak[i]["bytes"].get<int64_t>()) / (1 << 20),
                static_cast<long long>(at_peak[i]["blocks"].get<int64_t>()),
                at_peak[i]["label"].get<std::string>().c_str());
  if (at_peak.size() > 16) std::printf("memory at the peak: %zu more labels in --json\n", at_peak.size() - 16);
  if (!o.output.empty()) {
    Tensor t = from_host(host_out);
    outputs.stage("--output", [&](const std::string& tmp) {
      write_safetensors(tmp, {{"output", Tensor::from_f32(t.to_f32_vector(), t.shape(), spec.model.dtype)}});
    });
  }
  // ASCII only (the model name may hold anything): `--json -` puts it on a terminal.
  if (!o.json.empty()) outputs.stage_text("--json", metrics.dump(2, ' ', true) + "\n");
  outputs.commit();
  return 0;
}
}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Run a model spec (inference or training)");
  sub->add_option("model", o->model, "model spec (YAML)")->required()->check(CLI::ExistingFile);
  sub->add_option("--set", o->sets, "override a spec field: a.b=value (repeatable)");
  sub->add_option("--input", o->input,
                  "safetensors with `input` [tokens, hidden] (and `target` for training, where [batches, tokens, "
                  "hidden] also works)");
  sub->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "training: write checkpoints here (every run.checkpoint_every steps and after the last)");
  sub->add_option("--resume", o->resume, "training: continue from a checkpoint file or a --checkpoint-dir's newest");
  sub->add_option("--output", o->output, "write `output` [tokens, hidden] (model dtype) to this safetensors file");
  sub->add_option("--save-weights", o->save_weights, "write the (trained) global weights to this safetensors file");
  sub->add_option("--json", o->json, "write the metrics JSON to this file");
  sub->add_flag("--explain", o->explain, "print the plan: layers, parallel layout, gather paths");
  sub->add_flag("--keep-going", o->keep_going, "train past a non-finite loss (its update is skipped)");
  return {sub, [o] { return run(*o); }};
}
}  // namespace te::cli
