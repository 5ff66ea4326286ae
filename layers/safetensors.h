// The safetensors file format: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32"|"F64", "shape": [...], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"k": "v"}}, then the raw little-endian data. Reading validates everything
// (offsets in range, sizes matching shapes, full non-overlapping coverage) before returning.
#pragma once

#include <map>
#include <string>

#include "layers/module.h"

namespace tgrad::safetensors {

using Metadata = std::map<std::string, std::string>;

struct File {
  nn::NamedTensors tensors;  // CPU tensors, in data-offset order
  Metadata metadata;
};

// Writes `tensors` (any device, float32/float64, unique non-empty names; names and metadata
// valid UTF-8, as JSON requires) to a uniquely named temporary file beside `path`, fsyncs it and
// renames it over `path` (file_io::write_atomically): a failed save never leaves a half-written
// file at `path`, and concurrent saves to one path leave one of them whole.
void save(const std::string& path, const nn::NamedTensors& tensors, const Metadata& metadata);
// Reads and validates a whole regular file; throws tgrad::Error naming the path and the problem
// (a directory or device is refused as such; a file that is not safetensors is named when it
// looks like a known format: PyTorch's .pt, an image, text...). The header JSON may nest at most
// 128 deep and may not repeat a key (a tensor named twice is refused, naming it).
File load(const std::string& path);
// Parses the bytes of a file; `what` names the source in messages.
File parse(const std::string& bytes, const std::string& what);

}  // namespace tgrad::safetensors
