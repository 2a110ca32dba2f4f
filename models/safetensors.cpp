#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/element.h"
#include "engine/error.h"
#include "engine/printable.h"
#include "engine/temp_files.h"
#include "models/safetensors_header.h"
#include "models/spec_suggest.h"

namespace te {
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {
using json = nlohmann::json;

struct DTypeName {
  std::string_view name;
  DType dtype;
};
constexpr DTypeName kSafetensorsDTypes[] = {
    {"F32", DType::f32}, {"BF16", DType::bf16},  {"F16", DType::f16}, {"F8_E4M3", DType::fp8_e4m3},
    {"F8_E5M2", DType::fp8_e5m2}, {"U8", DType::u8}, {"I32", DType::i32}, {"I64", DType::i64},
};

// A name as it appears in a message: quoted, control characters escaped, long names cut (engine/printable.h).
std::string quote(std::string_view s) { return quoted_value(s); }

[[noreturn]] void fail(const std::string& label, const std::string& what, const std::string& hint) {
  TE_INPUT_ERROR(printable_path(label) << ": " << what, hint);
}

}  // namespace

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& d : kSafetensorsDTypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}
std::optional<std::string_view> safetensors_dtype_name(DType dtype) {
  for (const auto& d : kSafetensorsDTypes)
    if (d.dtype == dtype) return d.name;
  return std::nullopt;
}
std::string safetensors_dtype_names() {
  std::vector<std::string> v;
  for (const auto& d : kSafetensorsDTypes) v.emplace_back(d.name);
  return join_names(v, ", ");
}

namespace {
// The little-endian u64 header length at the start of a file of `size` bytes, checked against the file and the
// limit before anything is allocated. `first8` is read only when size >= 8.
uint64_t checked_header_length(const std::string& where, const uint8_t* first8, uint64_t size) {
  if (size < 8)
    fail(where, "truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length",
         kSafetensorsReexportHint);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first8[i];
  if (n > kSafetensorsMaxHeaderBytes)
    fail(where, "header length field claims " + std::to_string(n) + " bytes (limit " +
                    std::to_string(kSafetensorsMaxHeaderBytes) + "): not a safetensors file, or corrupt",
         kSafetensorsReexportHint);
  if (n > size - 8)
    fail(where, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
                    " bytes): truncated",
         kSafetensorsReexportHint);
  return n;
}
}  // namespace

SafetensorsReader SafetensorsReader::open(const std::string& path) {
  SafetensorsReader r;
  r.label_ = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not a safetensors file", "pass a file");
  // A FIFO or device would block the open or never end: only regular files (after symlinks) are read.
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    fail(path, "is not a regular file (a FIFO, device or socket)", "pass a safetensors file");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno), "check the path and its permissions");
  f.seekg(0, std::ios::end);
  const auto end = f.tellg();
  if (end < 0) fail(path, "cannot determine the file size", "pass a regular file");
  const uint64_t size = static_cast<uint64_t>(end);
  uint8_t len_bytes[8] = {};
  f.seekg(0);
  if (size >= 8) f.read(reinterpret_cast<char*>(len_bytes), 8);
  const uint64_t n = checked_header_length(path, len_bytes, size);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  if (!f) fail(path, "read error in the header", "check the file system");
  r.data_start_ = 8 + n;
  r.parse_header(header, size - 8 - n);
  return r;
}

SafetensorsReader SafetensorsReader::from_bytes(std::string bytes, const std::string& label) {
  SafetensorsReader r;
  r.label_ = label;
  const uint64_t size = bytes.size();
  const uint64_t n = checked_header_length(label, reinterpret_cast<const uint8_t*>(bytes.data()), size);
  r.data_start_ = 8 + n;
  r.memory_ = std::make_shared<const std::string>(std::move(bytes));
  r.parse_header(std::string_view(*r.memory_).substr(8, n), size - 8 - n);
  return r;
}

void SafetensorsReader::parse_header(std::string_view header, uint64_t data_bytes) {
  const std::string& L = label_;
  SafetensorsHeader h = parse_safetensors_header(header, data_bytes, L);  // models/safetensors_header.h
  metadata_ = std::move(h.metadata);
  entries_ = std::move(h.entries);

  // The data section must be covered exactly: sorted by position, each tensor starts where the previous ended.
  std::vector<const SafetensorsEntry*> by_pos;
  for (const auto& e : entries_) by_pos.push_back(&e);
  std::sort(by_pos.begin(), by_pos.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry* e : by_pos) {
    if (e->begin < pos)
      fail(L, "tensor " + quote(e->name) + " [" + std::to_string(e->begin) + ", " + std::to_string(e->end) +
                  ") overlaps tensor " + quote(prev->name) + " [" + std::to_string(prev->begin) + ", " +
                  std::to_string(prev->end) + ")",
           kSafetensorsReexportHint);
    if (e->begin > pos)
      fail(L, "bytes [" + std::to_string(pos) + ", " + std::to_string(e->begin) +
                  ") of the data section belong to no tensor (a hole before tensor " + quote(e->name) + ")",
           kSafetensorsReexportHint);
    pos = e->end;
    prev = e;
  }
  if (pos != data_bytes)
    fail(L, "the data section has " + std::to_string(data_bytes) + " bytes but the tensors cover only " +
                std::to_string(pos) + " (trailing bytes belong to no tensor)",
         kSafetensorsReexportHint);
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const SafetensorsEntry& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  if (const SafetensorsEntry* e = find(name)) return *e;
  std::vector<std::string> names;
  for (const auto& e : entries_) names.push_back(e.name);
  std::string near = closest_name(name, names);
  fail(label_, "tensor " + quote(name) + " is missing (the file has " + std::to_string(entries_.size()) +
                   " tensors)",
       near.empty() ? "list the file with `teengine inspect " + printable_path(label_) + "`"
                    : "did you mean " + quote(near) + "? (`teengine inspect " + printable_path(label_) +
                          "` lists them)");
}

void SafetensorsReader::read_bytes(uint64_t offset, uint64_t n, void* dst) const { read_runs(offset, n, n, 1, dst); }

void SafetensorsReader::read_runs(uint64_t offset, uint64_t n, uint64_t stride, uint64_t count, void* dst) const {
  if (n == 0 || count == 0) return;
  auto* out = static_cast<char*>(dst);
  if (memory_) {
    for (uint64_t i = 0; i < count; ++i) std::memcpy(out + i * n, memory_->data() + data_start_ + offset + i * stride, n);
    return;
  }
  std::ifstream f(label_, std::ios::binary);
  if (!f) fail(label_, std::string("cannot reopen: ") + std::strerror(errno), "was the file moved while in use?");
  for (uint64_t i = 0; i < count; ++i) {
    f.seekg(static_cast<std::streamoff>(data_start_ + offset + i * stride));
    f.read(out + i * n, static_cast<std::streamsize>(n));
    if (!f) fail(label_, "read error (was the file truncated while in use?)", kSafetensorsReexportHint);
  }
}

Tensor SafetensorsReader::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);  // [shape] dtype, CPU, C-order like the file
  read_bytes(e.begin, e.nbytes(), t.data_ptr());
  return t;
}

Tensor SafetensorsReader::read(const std::string& name, const Shape& shape, DType dtype) const {
  const SafetensorsEntry& e = entry(name);
  if (e.shape != shape || e.dtype != dtype)
    fail(label_, "tensor " + quote(name) + " is " + shape_str(e.shape) + " " + std::string(dtype_name(e.dtype)) +
                     ", expected " + shape_str(shape) + " " + std::string(dtype_name(dtype)),
         "the file does not match the model: check the model spec (hidden, ffn, out, dtype) or re-export");
  return read(name);
}

Tensor SafetensorsReader::read_converted(const std::string& name, const Shape& shape, DType dtype) const {
  const SafetensorsEntry& e = entry(name);
  if (e.shape != shape || !dtype_info(e.dtype).is_float)
    fail(label_, "tensor " + quote(name) + " is " + shape_str(e.shape) + " " + std::string(dtype_name(e.dtype)) +
                     ", expected " + shape_str(shape) + " of a float dtype",
         "the file does not match the model: check tokens/hidden in the spec or re-export");
  Tensor t = read(name);
  if (e.dtype == dtype) return t;
  return Tensor::from_f32(t.to_f32_vector(), shape, dtype);
}

Tensor SafetensorsReader::read_slice_converted(const std::string& name, const Shape& shape, int dim, int64_t begin,
                                               int64_t length, DType dtype) const {
  const SafetensorsEntry& e = entry(name);
  if (e.shape != shape || !dtype_info(e.dtype).is_float)
    fail(label_, "tensor " + quote(name) + " is " + shape_str(e.shape) + " " + std::string(dtype_name(e.dtype)) +
                     ", expected " + shape_str(shape) + " of a float dtype",
         "the file does not match the model: check the model spec (hidden, ffn, out) or re-export");
  TE_CHECK(dim >= 0 && dim < static_cast<int>(shape.size()) && begin >= 0 && length >= 0 &&
               begin + length <= shape[static_cast<size_t>(dim)],
           printable_path(label_) << ": slice [" << begin << ", " << begin + length << ") of dim " << dim
                                  << " is outside " << shape_str(shape));
  // The slice is `outer` runs of length·inner contiguous elements, one per index of the dimensions before `dim`.
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  const uint64_t eb = static_cast<uint64_t>(dtype_bits(e.dtype) / 8);
  Shape local = shape;
  local[static_cast<size_t>(dim)] = length;
  Tensor t = Tensor::empty(local, e.dtype);
  read_runs(e.begin + static_cast<uint64_t>(begin * inner) * eb, static_cast<uint64_t>(length * inner) * eb,
            static_cast<uint64_t>(shape[static_cast<size_t>(dim)] * inner) * eb, static_cast<uint64_t>(outer),
            t.data_ptr());
  if (e.dtype == dtype) return t;
  return Tensor::from_f32(t.to_f32_vector(), local, dtype);
}

// ---- writer ------------------------------------------------------------------------------------------------------

namespace {
struct Prepared {
  std::string header;                         // padded JSON
  std::vector<std::pair<Tensor, uint64_t>> parts;  // contiguous CPU tensors and their byte counts, in key order
};

Prepared prepare(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  Prepared p;
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      TE_INPUT_ERROR("cannot save a tensor named " << quote(name), "rename it");
    if (!t.defined()) TE_INPUT_ERROR("cannot save tensor " << quote(name) << ": it is undefined", "");
    auto dt = safetensors_dtype_name(t.dtype());
    if (!dt)
      TE_INPUT_ERROR("cannot save tensor " << quote(name) << ": dtype " << dtype_name(t.dtype())
                                           << " has no safetensors name",
                     "dequantize or convert it to " << safetensors_dtype_names() << " first");
    Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu());
    const uint64_t n = static_cast<uint64_t>(c.nbytes());
    h[name] = {{"dtype", std::string(*dt)}, {"shape", c.shape()}, {"data_offsets", {pos, pos + n}}};
    pos += n;
    p.parts.emplace_back(std::move(c), n);
  }
  p.header = h.dump();  // nlohmann objects are sorted maps: deterministic
  // Pad with spaces so the data section starts 8-byte aligned (as the reference implementation does).
  p.header.append((8 - (p.header.size() % 8)) % 8, ' ');
  return p;
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

void write_all(int fd, const void* data, size_t n, const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      TE_INPUT_ERROR("writing " << printable_path(tmp) << " failed: " << std::strerror(err),
                     "check free disk space and permissions");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}
}  // namespace

std::string encode_safetensors(const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);
  std::string out = le64(p.header.size()) + p.header;
  for (const auto& [t, n] : p.parts) out.append(static_cast<const char*>(t.data_ptr()), n);
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);  // every validation before any file is created
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    TE_INPUT_ERROR("cannot write " << printable_path(path) << ": directory " << printable_path(dir.string())
                                   << " does not exist",
                   "create it first or choose another path");
  std::string name = ".";  // appended in steps: GCC 12 warns (-Wrestrict) on "." + std::string&&
  name += target.filename().string();
  name += ".tmp.XXXXXX";
  std::string tmp = (dir / name).string();
  int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    TE_INPUT_ERROR("cannot create a temporary file in " << printable_path(dir.string()) << ": " << std::strerror(errno),
                   "check that the directory is writable");
  // Known to a SIGINT/SIGTERM handler (engine/temp_files.h) until it is renamed or removed.
  struct Registered {
    int slot;
    ~Registered() { forget_temp_file(slot); }
  } registered{register_temp_file(tmp)};
  const std::string len = le64(p.header.size());
  write_all(fd, len.data(), len.size(), tmp);
  write_all(fd, p.header.data(), p.header.size(), tmp);
  for (const auto& [t, n] : p.parts) write_all(fd, t.data_ptr(), n, tmp);
  // mkstemp creates 0600: keep the mode of the file being replaced, else rw-r--r-- (umask() is process-global and
  // racy to query, so it is not consulted).
  struct stat st {};
  ::fchmod(fd, ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644);
  const bool synced = ::fsync(fd) == 0;
  int err = errno;
  const bool closed = ::close(fd) == 0;
  if (!closed) err = errno;
  if (!synced || !closed) {
    ::unlink(tmp.c_str());
    TE_INPUT_ERROR("writing " << printable_path(path) << " failed: " << std::strerror(err), "check free disk space");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    TE_INPUT_ERROR("cannot rename the temporary file onto " << printable_path(path) << ": " << std::strerror(err),
                   "is the path a directory, or on another file system?");
  }
}

}  // namespace te
