// safetensors files under hostile or careless use: directories and devices given to load,
// concurrent savers and a symlink planted at a predictable temporary name. Each gets a clear
// tgrad::Error or a whole file, never a torn file or a write through the link.
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
