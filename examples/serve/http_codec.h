// The bodies of POST /v1/forward. A request is either safetensors holding an `input` tensor [tokens, hidden]
// (f32, bf16 or f16; the reply is safetensors holding `output` in the model dtype) or, for small requests, JSON
// {"shape": [tokens, hidden], "data": [row-major numbers]} (the reply is JSON of the same form). Decoding checks
// everything the client controls before any byte is copied, so a malformed body is an error, never a crash.
#pragma once
#include <teengine/teengine.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace serve {

// A client's mistake: the handler answers `status` (400, or 413 for a request too large) with the message.
struct BadRequest : std::runtime_error {
  int status;
  BadRequest(int status_code, const std::string& message) : std::runtime_error(message), status(status_code) {}
};

enum class BodyFormat { safetensors, json };
BodyFormat body_format(const std::string& content_type);  // JSON for application/json, else safetensors

struct RequestLimits {
  int64_t hidden = 0;      // the model's: the second dimension must equal it
  int64_t max_tokens = 0;  // more tokens than this → 413
};

teengine::HostTensor decode_safetensors(const std::string& body, const RequestLimits& limits);
teengine::HostTensor decode_json(const std::string& body, const RequestLimits& limits);
teengine::HostTensor decode(BodyFormat format, const std::string& body, const RequestLimits& limits);

std::string encode_safetensors(const teengine::HostTensor& tensor, const std::string& name);
std::string encode_json(const teengine::HostTensor& tensor);
std::string encode(BodyFormat format, const teengine::HostTensor& tensor);  // safetensors: named `output`
const char* content_type(BodyFormat format);

size_t element_bytes(const std::string& dtype);  // f32 4, bf16 and f16 2; 0 for anything else

}  // namespace serve
