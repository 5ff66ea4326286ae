// safetensors files under hostile or careless use: headers nested 200k deep, tensors named twice,
// names that are not UTF-8, directories and devices given to load, files of other formats,
// concurrent savers and a symlink planted at a predictable temporary name. Each gets a clear
// tgrad::Error or a whole file, never a crash, a torn file or a write through the link.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using namespace std::string_literals;

class SafetensorsHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tgrad_hostile_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // The names in the test directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header string and a data section.
std::string make_file(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + data;
}

std::string nested(const std::string& open, const std::string& close, int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i)
    s += open;
  for (int i = 0; i < depth; ++i)
    s += close;
  return s;
}

TEST_F(SafetensorsHostile, DeeplyNestedHeaderIsRefusedNotACrash) {
  // 200k levels overflowed the stack when the error message dumped the value.
  const int deep = 200000;
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"arrays_in_a_tensor", "{\"x\":" + nested("[", "]", deep) + "}"},
      {"arrays_at_the_top", nested("[", "]", deep)},
      {"objects", nested("{\"a\":", "}", deep)},
      {"in_metadata", "{\"__metadata__\":{\"k\":" + nested("[", "]", deep) + "}}"},
  };
  for (const auto& [name, header] : cases) {
    const std::string p = path(std::string(name) + ".safetensors");
    write_bytes(p, make_file(header, ""));
    const std::string e = error_of([&] { safetensors::load(p); });
    EXPECT_TRUE(contains(e, "nests JSON arrays/objects more than 128 deep") && contains(e, p))
        << name << ": " << e;
  }
  // 128 containers are parsed (and then refused for what they are); 129 are not.
  const std::string at_limit = "{\"x\":" + nested("[", "]", 127) + "}";
  EXPECT_TRUE(contains(error_of([&] { safetensors::parse(make_file(at_limit, ""), "f"); }),
                       "tensor 'x' must be a JSON object"));
  const std::string past_limit = "{\"x\":" + nested("[", "]", 128) + "}";
  EXPECT_TRUE(contains(error_of([&] { safetensors::parse(make_file(past_limit, ""), "f"); }),
                       "more than 128 deep"));
}

TEST_F(SafetensorsHostile, DuplicateNamesAreRefused) {
  const std::string x = R"({"dtype":"F32","shape":[2],"data_offsets":)";
  struct Case {
    const char* name;
    std::string bytes;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"same_range", make_file("{\"x\":" + x + "[0,8]},\"x\":" + x + "[0,8]}}", "12345678"),
       "tensor 'x' appears twice in the header (with the same data_offsets [0,8])"},
      {"different_ranges",
       make_file("{\"x\":" + x + "[0,8]},\"x\":" + x + "[8,16]}}", std::string(16, 'a')),
       "tensor 'x' appears twice in the header, with different data_offsets [0,8] and [8,16]"},
      {"field_twice",
       make_file(R"({"x":{"dtype":"F32","dtype":"F64","shape":[2],"data_offsets":[0,8]}})",
                 "12345678"),
       "key 'dtype' appears twice in the header entry 'x'"},
      {"metadata_twice", make_file(R"({"__metadata__":{"a":"1"},"__metadata__":{"a":"2"}})", ""),
       "__metadata__ appears twice in the header"},
      {"metadata_key_twice", make_file(R"({"__metadata__":{"a":"1","a":"2"}})", ""),
       "key 'a' appears twice in the header entry '__metadata__'"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of([&] { safetensors::parse(c.bytes, "f"); });
    EXPECT_TRUE(contains(e, c.message)) << c.name << ": " << e;
  }
  // Entries without data_offsets: no ranges to compare, so none are mentioned.
  const std::string bare =
      error_of([&] { safetensors::parse(make_file(R"({"x":5,"x":5})", ""), "f"); });
  EXPECT_TRUE(contains(bare, "tensor 'x' appears twice in the header") &&
              !contains(bare, "data_offsets"))
      << bare;
  // The same names in different objects are not duplicates.
  const safetensors::File ok = safetensors::parse(
      make_file("{\"x\":" + x + "[0,8]},\"__metadata__\":{\"x\":\"1\"}}", "12345678"), "f");
  EXPECT_EQ(ok.tensors.size(), 1u);
  EXPECT_EQ(ok.metadata.at("x"), "1");
}

TEST_F(SafetensorsHostile, NamesAndMetadataMustBeUtf8) {
  const Tensor t = ones({2});
  const std::string p = path("u.safetensors");
  // Invalid byte, overlong NUL, UTF-16 surrogate, above U+10FFFF, cut sequence.
  for (const std::string bad :
       {"w\xff", "\xc0\x80", "a\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    const std::string printed = [&] {
      std::string s;
      for (const char ch : bad) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x80) {
          s += ch;
        } else {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", c);
          s += hex;
        }
      }
      return s;
    }();
    const std::string as_name = error_of([&] { safetensors::save(p, {{bad, t}}, {}); });
    EXPECT_TRUE(contains(as_name, "tensor name \"" + printed + "\" is not valid UTF-8")) << as_name;
    const std::string as_key = error_of([&] { safetensors::save(p, {{"w", t}}, {{bad, "v"}}); });
    EXPECT_TRUE(contains(as_key, "metadata key \"" + printed + "\" is not valid UTF-8")) << as_key;
    const std::string as_value = error_of([&] { safetensors::save(p, {{"w", t}}, {{"k", bad}}); });
    EXPECT_TRUE(contains(as_value, "metadata value \"" + printed + "\" is not valid UTF-8"))
        << as_value;
  }
  EXPECT_TRUE(entries().empty());  // nothing was written
  // Valid UTF-8 of every length round trips.
  const std::string name = "w\xc3\xa9\xe2\x9c\x93\xf0\x9d\x84\x9e";  // "wé✓𝄞"
  safetensors::save(p, {{name, t}}, {{"note", name}});
  const safetensors::File f = safetensors::load(p);
  EXPECT_EQ(f.tensors.at(0).first, name);
  EXPECT_EQ(f.metadata.at("note"), name);
  // A header with a raw invalid byte in a name is refused by the JSON parser, as tgrad::Error.
  const std::string bad_header =
      make_file("{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "12345678");
  const std::string e = error_of([&] { safetensors::parse(bad_header, "f"); });
  EXPECT_TRUE(contains(e, "not valid JSON") && contains(e, "UTF-8")) << e;
}

TEST_F(SafetensorsHostile, DirectoriesAndDevicesAreNamedAsSuch) {
  const std::string d = path("a_directory");
  fs::create_directory(d);
  const std::string e = error_of([&] { safetensors::load(d); });
  EXPECT_TRUE(contains(e, "'" + d + "' is a directory, not a safetensors file")) << e;
  // A FIFO with no writer: refused at once rather than waiting for one.
  const std::string fifo = path("a_fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string f = error_of([&] { safetensors::load(fifo); });
  EXPECT_TRUE(contains(f, "is a FIFO (named pipe), not a safetensors file")) << f;
  if (fs::exists("/dev/null")) {
    const std::string n = error_of([&] { safetensors::load("/dev/null"); });
    EXPECT_TRUE(contains(n, "'/dev/null' is a character device")) << n;
  }
  const std::string missing = error_of([&] { safetensors::load(path("missing")); });
  EXPECT_TRUE(contains(missing, "cannot open") && contains(missing, "No such file or directory"))
      << missing;
}

// A sparse file larger than RAM + swap is refused from its size, before any allocation.
TEST_F(SafetensorsHostile, FileLargerThanMemoryIsRefusedBeforeReading) {
  const std::string p = path("huge.safetensors");
  write_bytes(p, "");
  std::error_code ec;
  fs::resize_file(p, uint64_t{1} << 43, ec);  // 8 TiB, no blocks allocated
  if (ec) GTEST_SKIP() << "this file system cannot hold an 8 TiB sparse file: " << ec.message();
  const std::string e = error_of([&] { safetensors::load(p); });
  EXPECT_TRUE(contains(e, "'" + p + "' is 8796093022208 bytes, more than the machine's") &&
              contains(e, "bytes of RAM + swap"))
      << e;
}

TEST_F(SafetensorsHostile, FilesOfOtherFormatsAreNamed) {
  struct Case {
    const char* name;
    std::string bytes;
    const char* kind;
  };
  const std::string png = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01"s;
  // torch.save's ZIP container and the legacy pickle (protocol 2) that older versions wrote.
  const std::string zip = "PK\x03\x04\x14\0\0\0\0\0\0\0!\0archive/data.pkl"s;
  const std::string pickle = "\x80\x02\x8a\x0alZ\xfc\x9c"s;
  const std::vector<Case> cases = {
      {"png", png, "a PNG image"},
      {"pt_zip", zip, "a ZIP archive, as torch.save writes .pt/.pth files"},
      {"pt_pickle", pickle, "a Python pickle"},
      {"text", "model weights go here\n", "a text file"},
      {"json", "{\"hidden_size\": 768}\n", "a text file"},
      {"short_text", "hi\n", "a text file"},
  };
  for (const Case& c : cases) {
    const std::string p = path(c.name);
    write_bytes(p, c.bytes);
    const std::string e = error_of([&] { safetensors::load(p); });
    EXPECT_TRUE(contains(e, "'" + p + "': not a safetensors file: it looks like " + c.kind))
        << c.name << ": " << e;
  }
  // A damaged safetensors file is not misnamed.
  safetensors::save(path("good"), {{"w", ones({2})}}, {});
  write_bytes(path("cut"), read_bytes(path("good")).substr(0, 12));
  const std::string e = error_of([&] { safetensors::load(path("cut")); });
  EXPECT_TRUE(contains(e, "runs past the end") && !contains(e, "looks like")) << e;
}

// Threads save different contents to one path at once while another loads it: every load and
// the final file are one save's contents exactly, and no temporary file is left.
TEST_F(SafetensorsHostile, ConcurrentSaveThreadsNeverTearTheFile) {
  const std::string p = path("m.safetensors");
  constexpr int kSavers = 4, kSaves = 20;
  std::vector<nn::NamedTensors> contents;
  for (int i = 0; i < kSavers; ++i) {
    const auto v = static_cast<double>(i + 1);
    contents.push_back({{"weight", full({256 * 1024}, v)}, {"bias", full({1000}, v, kFloat64)}});
  }
  safetensors::save(p, contents[0], {});
  // The value of every element of a loaded file, or -1 when the file mixes saves.
  auto value_of = [](const safetensors::File& f) {
    double value = f.tensors.at(0).second.to_vector<double>().at(0);
    for (const auto& [name, t] : f.tensors) {
      for (double v : t.to_vector<double>()) {
        if (v != value) return -1.0;
      }
    }
    return value;
  };
  std::vector<std::string> errors(kSavers + 1);
  std::atomic<bool> saving{true};
  std::vector<std::thread> threads;
  for (int i = 0; i < kSavers; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < kSaves; ++k) {
        const std::string e = error_of([&] { safetensors::save(p, contents[i], {}); });
        if (e != "<no tgrad::Error thrown>") errors[static_cast<size_t>(i)] = e;
      }
    });
  }
  threads.emplace_back([&] {
    while (saving) {
      double v = -1.0;
      const std::string e = error_of([&] { v = value_of(safetensors::load(p)); });
      if (v < 1.0 || v > kSavers) errors[kSavers] = "a load saw a torn file: " + e;
    }
  });
  for (int i = 0; i < kSavers; ++i)
    threads[static_cast<size_t>(i)].join();
  saving = false;
  threads.back().join();
  for (const std::string& e : errors)
    EXPECT_EQ(e, "");
  const double v = value_of(safetensors::load(p));
  EXPECT_TRUE(v >= 1.0 && v <= kSavers) << v;
  EXPECT_EQ(entries(), std::vector<std::string>{"m.safetensors"});
}

// A symlink planted at the temporary name saves used to have (`<path>.tmp`) is neither followed
// nor removed; the checkpoint is written beside it.
TEST_F(SafetensorsHostile, PlantedSymlinkAtTheOldTemporaryNameIsNotFollowed) {
  const std::string victim = path("victim.txt");
  write_bytes(victim, "precious");
  const std::string p = path("m.safetensors");
  fs::create_symlink(victim, p + ".tmp");
  safetensors::save(p, {{"w", full({1000}, 3.0)}}, {});
  EXPECT_EQ(read_bytes(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(p + ".tmp"));
  EXPECT_EQ(fs::read_symlink(p + ".tmp"), fs::path(victim));
  EXPECT_EQ(safetensors::load(p).tensors.at(0).second.to_vector<double>().at(999), 3.0);
  EXPECT_EQ(entries(),
            (std::vector<std::string>{"m.safetensors", "m.safetensors.tmp", "victim.txt"}));
}

}  // namespace
}  // namespace tgrad
