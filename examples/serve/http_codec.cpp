#include "http_codec.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

namespace serve {
namespace {
using nlohmann::json;

// safetensors dtype names ↔ HostTensor's.
const char* st_dtype(const std::string& dtype) {
  if (dtype == "f32") return "F32";
  if (dtype == "bf16") return "BF16";
  if (dtype == "f16") return "F16";
  return nullptr;
}
std::string host_dtype(const std::string& st) {
  if (st == "F32") return "f32";
  if (st == "BF16") return "bf16";
  if (st == "F16") return "f16";
  return "";
}

// shape must be [tokens, hidden] with 1 ≤ tokens ≤ max_tokens: the bound also keeps every size below overflow.
void check_shape(const json& shape, const RequestLimits& limits, int64_t* tokens) {
  if (!shape.is_array() || shape.size() != 2 || !shape[0].is_number_integer() || !shape[1].is_number_integer())
    throw BadRequest(400, "shape must be [tokens, hidden] (two integers)");
  const int64_t t = shape[0].get<int64_t>(), h = shape[1].get<int64_t>();
  if (h != limits.hidden)
    throw BadRequest(400, "shape [" + std::to_string(t) + ", " + std::to_string(h) + "]: the model's hidden size is " +
                              std::to_string(limits.hidden));
  if (t < 1) throw BadRequest(400, "shape [" + std::to_string(t) + ", " + std::to_string(h) + "]: tokens must be ≥ 1");
  if (t > limits.max_tokens)
    throw BadRequest(413, std::to_string(t) + " tokens is more than this server takes in one request (" +
                              std::to_string(limits.max_tokens) + ", --max-batch-tokens)");
  *tokens = t;
}
}  // namespace

size_t element_bytes(const std::string& dtype) {
  if (dtype == "f32") return 4;
  if (dtype == "bf16" || dtype == "f16") return 2;
  return 0;
}

BodyFormat body_format(const std::string& content_type) {
  return content_type.rfind("application/json", 0) == 0 ? BodyFormat::json : BodyFormat::safetensors;
}

const char* content_type(BodyFormat format) {
  return format == BodyFormat::json ? "application/json" : "application/octet-stream";
}

teengine::HostTensor decode_safetensors(const std::string& body, const RequestLimits& limits) {
  if (body.size() < 8) throw BadRequest(400, "safetensors body shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(body[static_cast<size_t>(i)]);
  if (n > body.size() - 8)
    throw BadRequest(400, "safetensors header length " + std::to_string(n) + " exceeds the body (" +
                              std::to_string(body.size()) + " bytes)");
  const json header = json::parse(body.begin() + 8, body.begin() + 8 + static_cast<std::ptrdiff_t>(n), nullptr,
                                  /*allow_exceptions=*/false);
  if (!header.is_object()) throw BadRequest(400, "safetensors header is not a JSON object");
  const auto it = header.find("input");
  if (it == header.end() || !it->is_object())
    throw BadRequest(400, "safetensors body has no tensor named `input`");
  const json& d = *it;
  if (!d.contains("dtype") || !d["dtype"].is_string() || host_dtype(d["dtype"].get<std::string>()).empty())
    throw BadRequest(400, "`input` dtype must be F32, BF16 or F16");
  int64_t tokens = 0;
  check_shape(d.value("shape", json()), limits, &tokens);
  const json& off = d.value("data_offsets", json());
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw BadRequest(400, "`input` data_offsets must be [begin, end]");
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>(), data = body.size() - 8 - n;
  teengine::HostTensor t;
  t.dtype = host_dtype(d["dtype"].get<std::string>());
  t.shape = {tokens, limits.hidden};
  const uint64_t need = static_cast<uint64_t>(tokens * limits.hidden) * element_bytes(t.dtype);
  if (begin > end || end > data || end - begin != need)
    throw BadRequest(400, "`input` data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                              "] do not hold " + std::to_string(need) + " bytes within the " + std::to_string(data) +
                              " data bytes");
  const char* p = body.data() + 8 + n + begin;
  t.bytes.assign(reinterpret_cast<const uint8_t*>(p), reinterpret_cast<const uint8_t*>(p) + need);
  return t;
}

teengine::HostTensor decode_json(const std::string& body, const RequestLimits& limits) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw BadRequest(400, "body is not a JSON object {\"shape\": [t, h], \"data\": [...]}");
  int64_t tokens = 0;
  check_shape(j.value("shape", json()), limits, &tokens);
  const auto it = j.find("data");
  if (it == j.end() || !it->is_array()) throw BadRequest(400, "`data` must be an array of numbers");
  const size_t numel = static_cast<size_t>(tokens * limits.hidden);
  if (it->size() != numel)
    throw BadRequest(400, "`data` has " + std::to_string(it->size()) + " numbers; shape [" + std::to_string(tokens) +
                              ", " + std::to_string(limits.hidden) + "] needs " + std::to_string(numel));
  std::vector<float> values(numel);
  for (size_t i = 0; i < numel; ++i) {
    const json& v = (*it)[i];
    if (!v.is_number()) throw BadRequest(400, "data[" + std::to_string(i) + "] is not a number");
    values[i] = static_cast<float>(v.get<double>());
    if (!std::isfinite(values[i])) throw BadRequest(400, "data[" + std::to_string(i) + "] is not a finite f32");
  }
  return teengine::HostTensor::from_floats({tokens, limits.hidden}, values);
}

teengine::HostTensor decode(BodyFormat format, const std::string& body, const RequestLimits& limits) {
  return format == BodyFormat::json ? decode_json(body, limits) : decode_safetensors(body, limits);
}

std::string encode_safetensors(const teengine::HostTensor& tensor, const std::string& name) {
  const char* dt = st_dtype(tensor.dtype);
  if (!dt) throw std::runtime_error("cannot encode dtype " + tensor.dtype);
  std::string header = json{{name, {{"dtype", dt}, {"shape", tensor.shape}, {"data_offsets", {0, tensor.bytes.size()}}}}}
                           .dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');  // the format allows trailing spaces; 8-aligned data
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
  return out;
}

std::string encode_json(const teengine::HostTensor& tensor) {
  return json{{"shape", tensor.shape}, {"dtype", tensor.dtype}, {"data", tensor.to_floats()}}.dump();
}

std::string encode(BodyFormat format, const teengine::HostTensor& tensor) {
  return format == BodyFormat::json ? encode_json(tensor) : encode_safetensors(tensor, "output");
}

}  // namespace serve
