#include "tools/teengine/output_set.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/error.h"
#include "engine/printable.h"
#include "engine/temp_files.h"

namespace te::cli {
namespace fs = std::filesystem;
namespace {

// Removes the temporaries (the set's and write_safetensors' own), then ends the process with the signal.
extern "C" void on_signal(int sig) {
  remove_temp_files_signal_safe();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string describe_kind(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  return "not a regular file";
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

}  // namespace

OutputSet::OutputSet(std::vector<OutputRequest> outputs, const std::vector<std::string>& inputs) {
  for (OutputRequest& r : outputs) {
    if (r.path.empty()) continue;
    const std::string& p = r.path;
    if (p == "-") {
      if (!r.stdout_ok) TE_INPUT_ERROR(r.flag << " -: this output cannot go to stdout", "give a file path");
      entries_.push_back({r, "", "", false});
      continue;
    }
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      TE_INPUT_ERROR(
          r.flag << " " << printable_path(p) << ": is " << describe_kind(st) << ", which the output would replace",
          "give the path of a regular file (or a new one)" << (r.stdout_ok ? "; '-' writes to stdout" : ""));
    const fs::path dir = fs::path(p).has_parent_path() ? fs::path(p).parent_path() : fs::path(".");
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      TE_INPUT_ERROR(
          r.flag << " " << printable_path(p) << ": directory " << printable_path(dir.string()) << " does not exist",
          "create it first or choose another path");
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      TE_INPUT_ERROR(
          r.flag << " " << printable_path(p) << ": directory " << printable_path(dir.string()) << " is not writable",
          "choose a directory you can write");
    for (const std::string& in : inputs)
      if (!in.empty() && same_file(p, in))
        TE_INPUT_ERROR(r.flag << " " << printable_path(p) << ": is an input of this run (" << printable_path(in)
                              << ") and would be overwritten",
                       "write the output somewhere else");
    for (const Entry& e : entries_)
      if (e.req.path != "-" && (e.req.path == p || same_file(e.req.path, p) ||
                                fs::weakly_canonical(e.req.path, ec) == fs::weakly_canonical(p, ec)))
        TE_INPUT_ERROR(r.flag << " " << printable_path(p) << ": " << e.req.flag << " writes the same file",
                       "give each output its own path");
    entries_.push_back({r, "", "", false});
  }
}

OutputSet::~OutputSet() {
  for (Entry& e : entries_)
    if (!e.temp.empty()) {
      ::unlink(e.temp.c_str());
      forget_temp_file(e.slot);
    }
}

bool OutputSet::requested(const std::string& flag) const {
  for (const Entry& e : entries_)
    if (e.req.flag == flag) return true;
  return false;
}

OutputSet::Entry& OutputSet::entry(const std::string& flag) {
  for (Entry& e : entries_)
    if (e.req.flag == flag) return e;
  TE_THROW("output " << flag << " was not requested", "check requested() first");
}

void OutputSet::stage(const std::string& flag, const std::function<void(const std::string&)>& write) {
  Entry& e = entry(flag);
  const fs::path target(e.req.path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string name = target.filename().string();
  name.insert(0, 1, '.');
  name += ".teengine.XXXXXX";
  std::string tmp = (dir / name).string();
  const int fd = ::mkstemp(tmp.data());  // a unique name: two runs writing beside each other never collide
  if (fd < 0)
    TE_INPUT_ERROR(flag << " " << printable_path(e.req.path) << ": cannot create a temporary file in "
                        << printable_path(dir.string()) << ": " << std::strerror(errno),
                   "check that the directory is writable");
  // The final file keeps the mode of the one it replaces, else rw-r--r-- (mkstemp creates 0600).
  struct stat st {};
  ::fchmod(fd, ::stat(e.req.path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644);
  ::close(fd);
  e.temp = tmp;
  e.slot = register_temp_file(tmp);
  write(tmp);  // throws: the destructor removes the temporary file
  e.staged = true;
}

void OutputSet::stage_text(const std::string& flag, const std::string& text) {
  Entry& e = entry(flag);
  if (e.req.path == "-") {
    e.stdout_text = text;
    e.staged = true;
    return;
  }
  stage(flag, [&](const std::string& tmp) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_TRUNC);
    bool ok = fd >= 0;
    for (size_t off = 0; ok && off < text.size();) {
      const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) off += static_cast<size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0;
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (!ok)
      TE_INPUT_ERROR(flag << " " << printable_path(e.req.path) << ": writing failed: " << std::strerror(err),
                     "check free disk space");
  });
}

void OutputSet::commit() {
  for (const Entry& e : entries_)
    if (!e.staged) TE_THROW("output " << e.req.flag << " was requested but not written", "stage every output first");
  for (Entry& e : entries_) {
    if (e.req.path == "-") {
      std::fputs(e.stdout_text.c_str(), stdout);
      std::fflush(stdout);
      continue;
    }
    if (::rename(e.temp.c_str(), e.req.path.c_str()) != 0)
      TE_INPUT_ERROR(e.req.flag << " " << printable_path(e.req.path)
                                << ": cannot rename the finished file onto it: " << std::strerror(errno),
                     "is the path on another file system, or was it replaced by a directory meanwhile?");
    forget_temp_file(e.slot);
    e.temp.clear();
  }
}

void OutputSet::install_signal_cleanup() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace te::cli
