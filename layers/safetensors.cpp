// safetensors reading (parse everything with bounded nesting and no duplicate keys, validate
// everything, then build tensors; files of other formats are named) and writing (UTF-8 checked,
// header padded to 8 bytes as the reference writer does, written atomically by file_io).
#include "layers/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <vector>

#include "layers/file_io.h"
#include "layers/utf8.h"

namespace tgrad::safetensors {

static_assert(
    std::endian::native == std::endian::little,
    "safetensors data is little-endian; tgrad reads and writes it on little-endian hosts");

namespace {

// The reference implementation refuses headers above 100 MB; so does this one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The most arrays/objects a header may nest; a valid header needs 3. The reference loader's JSON
// parser stops at 128 too. nlohmann's parser is iterative, but dumping a value into a message
// recurses once per level and overflows the stack near 100k levels.
constexpr int kMaxJsonDepth = 128;

using Json = nlohmann::json;
using detail::printable;
using detail::utf8_error_at;

const char* dtype_code(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "F32";
    case DType::float64:
      return "F64";
    case DType::int64:
      return "I64";  // BatchNorm's num_batches_tracked, as PyTorch writes it
  }
  return "F32";
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// JSON strings must be UTF-8; the JSON library would throw its own exception when writing.
void check_utf8(const std::string& fn, const char* what, const std::string& s) {
  const size_t at = utf8_error_at(s);
  TGRAD_CHECK(at == std::string::npos, fn, ": ", what, " \"", printable(s),
              "\" is not valid UTF-8 (at byte ", at,
              "); safetensors headers are JSON, whose strings must be UTF-8");
}

// What a file that is not safetensors looks like, from its first bytes, or "" when unknown.
// Only asked once the file has failed the structural checks, so a valid file is never misnamed.
std::string foreign_format(const std::string& bytes) {
  const std::string_view b(bytes);
  auto starts = [&](std::string_view magic) { return b.substr(0, magic.size()) == magic; };
  if (starts("\x89PNG\r\n\x1a\n")) return "a PNG image";
  if (starts("\xff\xd8\xff")) return "a JPEG image";
  if (starts("PK\x03\x04") || starts("PK\x05\x06")) {
    return "a ZIP archive, as torch.save writes .pt/.pth files (convert it in Python with "
           "safetensors.torch.save_file(torch.load(path), out_path))";
  }
  if (b.size() >= 2 && b[0] == '\x80' && b[1] >= 2 && b[1] <= 5) {
    return "a Python pickle, as older torch.save wrote .pt/.pth files (convert it in Python "
           "with safetensors.torch.save_file(torch.load(path), out_path))";
  }
  if (starts("\x1f\x8b")) return "a gzip-compressed file";
  if (starts("\x89HDF\r\n\x1a\n")) return "an HDF5 file";
  if (starts("\x93NUMPY")) return "a NumPy .npy array";
  if (starts("GGUF")) return "a GGUF file";
  // Text: the first bytes are printable or white space, and valid UTF-8 (a cut sequence at the
  // end of the sample is allowed).
  const std::string sample(b.substr(0, 512));
  if (sample.empty()) return "";
  for (const char ch : sample) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return "";
    if (c == 0x7f) return "";
  }
  const size_t bad = utf8_error_at(sample);
  if (bad != std::string::npos && bad + 4 < sample.size()) return "";
  return "a text file";
}

// The checks nlohmann's parser does not make, run on its parse events: nesting depth, and
// duplicate keys (the parser keeps the last value silently). A duplicate tensor is reported
// once its second value is parsed, saying whether the two data_offsets differ.
class HeaderChecker {
 public:
  explicit HeaderChecker(const std::string& where) : where_(where) {}

  void on_event(int depth, Json::parse_event_t event, const Json& parsed) {
    using Event = Json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        // `depth` counts the containers already open around this one.
        TGRAD_CHECK(depth < kMaxJsonDepth, where_,
                    ": the header nests JSON arrays/objects more than ", kMaxJsonDepth,
                    " deep (a valid header needs 3)");
        if (event == Event::object_start) keys_.emplace_back();
        break;
      case Event::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (depth == 1) {
          member_ = key;
          in_member_ = true;
        }
        if (!keys_.back().insert(key).second) {
          TGRAD_CHECK(depth == 1, where_, ": key '", key, "' appears twice in the header entry '",
                      member_, "'");
          duplicate_ = true;
        }
        break;
      }
      case Event::object_end:
        keys_.pop_back();
        [[fallthrough]];
      case Event::array_end:
      case Event::value:
        if (depth == 1 && in_member_) finish_member(parsed);
        break;
    }
  }

 private:
  void finish_member(const Json& value) {
    in_member_ = false;
    Json offsets;  // null when the entry has none (its own check reports that later)
    if (value.is_object() && value.contains("data_offsets")) offsets = value.at("data_offsets");
    if (!duplicate_) {
      offsets_.emplace(member_, std::move(offsets));
      return;
    }
    TGRAD_CHECK(member_ != "__metadata__", where_, ": __metadata__ appears twice in the header");
    const Json& first = offsets_.at(member_);
    const std::string twice = "tensor '" + member_ + "' appears twice in the header";
    TGRAD_CHECK(first == offsets, where_, ": ", twice, ", with different data_offsets ",
                first.dump(), " and ", offsets.dump());
    TGRAD_CHECK(offsets.is_null(), where_, ": ", twice, " (with the same data_offsets ",
                offsets.dump(), ")");
    TGRAD_FAIL(where_, ": ", twice);
  }

  const std::string& where_;
  std::vector<std::set<std::string>> keys_;  // the keys seen in each open object
  std::map<std::string, Json> offsets_;      // each top-level entry's data_offsets
  std::string member_;                       // the top-level key being parsed
  bool in_member_ = false;
  bool duplicate_ = false;
};

uint64_t read_u64_le(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return n;
}

uint64_t non_negative_int(const nlohmann::json& v, const std::string& what) {
  TGRAD_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), what,
              " must be a non-negative integer, got ", v.dump());
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& where, const std::string& name, const nlohmann::json& v) {
  const std::string ctx = where + ": tensor '" + name + "'";
  TGRAD_CHECK(v.is_object(), ctx, " must be a JSON object, got ", v.dump());
  for (const auto& [field, value] : v.items()) {
    TGRAD_CHECK(field == "dtype" || field == "shape" || field == "data_offsets", ctx,
                " has an unknown field '", field, "'");
  }
  TGRAD_CHECK(v.contains("dtype") && v["dtype"].is_string(), ctx, " has no string 'dtype'");
  TGRAD_CHECK(v.contains("shape") && v["shape"].is_array(), ctx, " has no array 'shape'");
  TGRAD_CHECK(
      v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
      ctx, " has no 'data_offsets' pair");
  Entry e;
  e.name = name;
  const std::string dt = v["dtype"].get<std::string>();
  TGRAD_CHECK(dt == "F32" || dt == "F64" || dt == "I64", ctx, " has dtype '", dt,
              "', which tgrad does not support (F32, F64 and I64 only)");
  e.dtype = dt == "F32" ? DType::float32 : dt == "F64" ? DType::float64 : DType::int64;
  TGRAD_CHECK(v["shape"].size() <= static_cast<size_t>(kMaxRank), ctx, " has rank ",
              v["shape"].size(), ", above tgrad's maximum rank ", kMaxRank);
  for (const auto& s : v["shape"]) {
    const uint64_t size = non_negative_int(s, ctx + " shape entry");
    TGRAD_CHECK(size < (uint64_t{1} << 62), ctx, " has an absurd size ", size);
    e.shape.push_back(static_cast<int64_t>(size));
  }
  e.begin = non_negative_int(v["data_offsets"][0], ctx + " data_offsets[0]");
  e.end = non_negative_int(v["data_offsets"][1], ctx + " data_offsets[1]");
  TGRAD_CHECK(e.begin <= e.end, ctx, " has data_offsets [", e.begin, ", ", e.end,
              "] that end before they begin");
  const auto numel = static_cast<uint64_t>(shape_numel(e.shape, "safetensors::load"));
  uint64_t nbytes = 0;
  TGRAD_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes),
              ctx, " of shape ", e.shape, " ", dt, " needs more bytes than 64 bits can count");
  TGRAD_CHECK(e.end - e.begin == nbytes, ctx, " of shape ", e.shape, " ", dt, " needs ", nbytes,
              " bytes but data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin);
  return e;
}

}  // namespace

File parse(const std::string& bytes, const std::string& what) {
  const std::string where = "safetensors::load: " + what;
  // A file of another format fails one of these first checks; then say what it looks like.
  auto check_format = [&](bool ok, const auto&... problem) {
    if (ok) return;
    const std::string kind = foreign_format(bytes);
    TGRAD_CHECK(kind.empty(), where, ": not a safetensors file: it looks like ", kind, " (",
                problem..., ")");
    TGRAD_FAIL(where, ": ", problem...);
  };
  check_format(bytes.size() >= 8, "the file is ", bytes.size(),
               " bytes, shorter than the 8-byte header length (truncated?)");
  const uint64_t header_len = read_u64_le(bytes);
  check_format(header_len <= kMaxHeaderBytes, "header length ", header_len,
               " exceeds the limit of ", kMaxHeaderBytes, " bytes (corrupted?)");
  check_format(8 + header_len <= bytes.size(), "header length ", header_len,
               " runs past the end of the ", bytes.size(), "-byte file (truncated?)");
  Json header;
  HeaderChecker checker(where);
  try {
    header =
        Json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_len),
                    [&checker](int depth, Json::parse_event_t event, Json& parsed) {
                      checker.on_event(depth, event, parsed);
                      return true;
                    });
  } catch (const Json::exception& e) {
    check_format(false, "the header is not valid JSON: ", e.what());
  }
  check_format(header.is_object(), "the header must be a JSON object");

  File file;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      TGRAD_CHECK(value.is_object(), where, ": __metadata__ must be an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        TGRAD_CHECK(mv.is_string(), where, ": __metadata__ value of '", mk,
                    "' must be a string, got ", mv.dump());
        file.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    TGRAD_CHECK(!key.empty(), where, ": a tensor has an empty name");
    entries.push_back(parse_entry(where, key, value));
  }

  // The data section must be covered exactly: no overlap, no gap, nothing after the last tensor.
  const uint64_t data_size = bytes.size() - 8 - header_len;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    TGRAD_CHECK(e.end <= data_size, where, ": tensor '", e.name, "' data_offsets [", e.begin, ", ",
                e.end, "] run past the ", data_size, "-byte data section (truncated?)");
    TGRAD_CHECK(e.begin >= covered, where, ": tensor '", e.name, "' [", e.begin, ", ", e.end,
                ") overlaps tensor '", previous ? previous->name : "", "' [",
                previous ? previous->begin : 0, ", ", covered, ")");
    TGRAD_CHECK(e.begin == covered, where, ": bytes [", covered, ", ", e.begin,
                ") of the data section belong to no tensor");
    covered = e.end;
    previous = &e;
  }
  TGRAD_CHECK(covered == data_size, where, ": ", data_size - covered,
              " bytes after the last tensor belong to no tensor");

  const char* data = bytes.data() + 8 + header_len;
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, TensorOptions(e.dtype));
    if (e.end > e.begin) std::memcpy(t.raw_data(), data + e.begin, e.end - e.begin);
    file.tensors.emplace_back(e.name, t);
  }
  return file;
}

File load(const std::string& path) {
  return parse(file_io::read_regular_file(path, "safetensors::load"), "'" + path + "'");
}

void save(const std::string& path, const nn::NamedTensors& tensors, const Metadata& metadata) {
  const std::string fn = "safetensors::save: '" + path + "'";
  Json header = Json::object();
  std::set<std::string> names;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TGRAD_CHECK(!name.empty() && name != "__metadata__", fn, ": invalid tensor name '",
                printable(name), "'");
    check_utf8(fn, "tensor name", name);
    TGRAD_CHECK(names.insert(name).second, fn, ": duplicate tensor name '", name, "'");
    TGRAD_CHECK(t.defined(), fn, ": tensor '", name, "' is undefined");
    host.push_back(t.detach().to(Device(kCPU)));
    const auto nbytes = static_cast<uint64_t>(t.nbytes());
    header[name] = {{"dtype", dtype_code(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  for (const auto& [key, value] : metadata) {
    check_utf8(fn, "metadata key", key);
    check_utf8(fn, "metadata value", value);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned

  unsigned char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>(json.size() >> (8 * i));
  std::vector<file_io::Chunk> chunks = {{len, sizeof len}, {json.data(), json.size()}};
  for (const Tensor& t : host)
    chunks.push_back({t.raw_data(), static_cast<size_t>(t.nbytes())});
  file_io::write_atomically(path, chunks, fn);
}

}  // namespace tgrad::safetensors
