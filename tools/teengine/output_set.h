// The files a command writes (--output, --json, --save-weights), handled as one set:
//  - checked before the run starts: each path's directory exists and is writable; the path is absent or a regular
//    file (never a directory, device, FIFO or symlink, which a rename would silently replace); no output is one of
//    the command's inputs (spec, weights, --input); no two outputs share a path. `-` means stdout where a flag
//    allows it (--json);
//  - written to unique temporary files beside their targets (fsynced), registered so that SIGINT/SIGTERM removes
//    them, and renamed onto the targets only when every one of them is complete: a failure leaves the previous set,
//    never a mix, and no temporary file behind.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace te::cli {

struct OutputRequest {
  std::string flag;  // "--output": named in every message about this path
  std::string path;  // empty: not requested
  bool stdout_ok = false;  // "-" writes to stdout
};

class OutputSet {
 public:
  // Validates every requested path against each other and against `inputs` (throws te::InputError naming the flag).
  OutputSet(std::vector<OutputRequest> outputs, const std::vector<std::string>& inputs);
  ~OutputSet();  // removes temporary files that were never committed
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  bool requested(const std::string& flag) const;
  // Writes the flag's file through `write(temp_path)` (or `text` for text outputs) into a temporary file.
  void stage(const std::string& flag, const std::function<void(const std::string& temp_path)>& write);
  void stage_text(const std::string& flag, const std::string& text);
  // Renames every staged file onto its target (text to stdout for "-").
  void commit();

  // SIGINT/SIGTERM remove the temporary files of every live OutputSet, then the process ends with the signal.
  static void install_signal_cleanup();

 private:
  struct Entry {
    OutputRequest req;
    std::string temp;        // staged file ("" until staged)
    std::string stdout_text;  // "-": what commit() prints
    bool staged = false;
    int slot = -1;            // the temporary's slot in engine/temp_files.h
  };
  Entry& entry(const std::string& flag);
  std::vector<Entry> entries_;
};

}  // namespace te::cli
