#include "tools/teengine/checkpoint_dir.h"

#include <cstdio>
#include <filesystem>

#include "engine/error.h"
#include "engine/printable.h"

namespace te::cli {
namespace fs = std::filesystem;

std::string checkpoint_file_name(int64_t step) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "step-%08lld.safetensors", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> checkpoint_step_of(const std::string& f) {
  const std::string head = "step-", tail = ".safetensors";
  if (f.size() <= head.size() + tail.size() || f.rfind(head, 0) != 0 ||
      f.compare(f.size() - tail.size(), tail.size(), tail) != 0)
    return std::nullopt;
  const std::string digits = f.substr(head.size(), f.size() - head.size() - tail.size());
  if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

std::string resolve_resume(const std::string& p) {
  std::error_code ec;
  if (!fs::exists(p, ec))
    TE_INPUT_ERROR("--resume " << printable_path(p) << ": does not exist",
                   "give a checkpoint file or the --checkpoint-dir of a run that wrote one (start without --resume "
                   "to train from the beginning)");
  if (!fs::is_directory(p, ec)) return p;
  std::string best;
  int64_t best_step = -1;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    const std::optional<int64_t> s = checkpoint_step_of(e.path().filename().string());
    if (s && *s > best_step && e.is_regular_file(ec)) {
      best_step = *s;
      best = e.path().string();
    }
  }
  if (ec)
    TE_INPUT_ERROR("--resume " << printable_path(p) << ": cannot list the directory (" << ec.message() << ")",
                   "give a readable directory or a checkpoint file");
  if (best.empty())
    TE_INPUT_ERROR("--resume " << printable_path(p) << ": the directory holds no step-N.safetensors checkpoint",
                   "pass the --checkpoint-dir of a run that wrote one, or a checkpoint file (start without --resume "
                   "to train from the beginning)");
  return best;
}

CheckpointDir::CheckpointDir(std::string dir, int64_t every, int64_t first_step, int64_t last_step,
                             const std::vector<std::string>& inputs, const std::vector<OutputRequest>& outputs,
                             const std::vector<std::string>& data_dirs)
    : dir_(std::move(dir)), every_(every), first_(first_step), last_(last_step), inputs_(inputs) {
  std::error_code ec;
  if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec))
    TE_INPUT_ERROR("--checkpoint-dir " << dir_ << ": is a file, not a directory",
                   "give a directory (it is created when missing)");
  // Every rank creates it: under a launcher none waits for another.
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_, ec))
    TE_INPUT_ERROR("--checkpoint-dir " << dir_ << ": cannot create the directory (" << ec.message() << ")",
                   "give a directory you can write, or create it first");
  for (const std::string& d : data_dirs)
    if (fs::is_directory(d, ec) && fs::equivalent(d, dir_, ec))
      TE_INPUT_ERROR("--checkpoint-dir " << dir_ << ": is also a data directory (" << d
                                         << "): its checkpoints would be read as batches",
                     "write checkpoints to a directory of their own");
  for (const OutputRequest& o : outputs) {
    if (o.path.empty() || o.path == "-") continue;
    const fs::path p(o.path);
    const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
    const std::optional<int64_t> s = checkpoint_step_of(p.filename().string());
    if (s && due(*s) && fs::equivalent(parent, dir_, ec))
      TE_INPUT_ERROR(
          o.flag << " " << o.path << ": --checkpoint-dir writes the same file (the checkpoint of step " << *s << ")",
          "give each output its own path");
  }
  // The paths the run will write that exist now (only those can be a directory, a link or an input), and the
  // last one (a new file: is the directory writable).
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::optional<int64_t> s = checkpoint_step_of(e.path().filename().string());
    if (s && due(*s)) check_path(e.path().string());
  }
  if (last_ > first_) check_path(path(last_));
}

bool CheckpointDir::due(int64_t s) const {
  return s > first_ && s <= last_ && ((every_ > 0 && s % every_ == 0) || s == last_);
}

std::string CheckpointDir::path(int64_t step) const { return (fs::path(dir_) / checkpoint_file_name(step)).string(); }

void CheckpointDir::check_path(const std::string& p) const { OutputSet({{"--checkpoint-dir", p}}, inputs_); }

std::string CheckpointDir::write(teengine::Engine& engine, int64_t step,
                                 const std::map<std::string, std::string>& metadata) const {
  const std::string p = path(step);
  if (engine.rank() != 0) {  // takes part in the gather; rank 0 alone writes
    engine.save_checkpoint(p, metadata);
    return p;
  }
  OutputSet out({{"--checkpoint-dir", p}}, inputs_);
  out.stage("--checkpoint-dir", [&](const std::string& tmp) { engine.save_checkpoint(tmp, metadata); });
  out.commit();
  return p;
}

}  // namespace te::cli
