// Checkpoints: safetensors round trips of modules and optimizers, the file layout PyTorch
// expects, and every kind of bad file (truncated, bad JSON, offsets out of range, overlapping,
// gaps, unsupported dtypes, mismatched names/shapes/dtypes), each leaving the module unchanged.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test under the system temp dir.
class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tgrad_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::shared_ptr<nn::SequentialImpl> make_net(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::SequentialImpl>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::LinearImpl>(3, 8, gen), std::make_shared<nn::ReLUImpl>(),
      std::make_shared<nn::UnflattenImpl>(1, Shape{2, 4}),
      std::make_shared<nn::ConvTranspose1dImpl>(nn::ConvTranspose1dOptions(2, 3, 3).stride(2), gen)});
}

std::vector<Tensor> snapshot(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters())
    out.push_back(p.detach().clone());
  return out;
}

bool same_as(const nn::Module& m, const std::vector<Tensor>& snap) {
  const auto params = m.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!equal(params[i], snap[i])) return false;
  }
  return true;
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
    bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + data;
}

TEST_F(Checkpoint, ModuleRoundTripWithPyTorchLayout) {
  auto a = make_net(1);
  auto b = make_net(2);
  nn::save_module(*a, path("m.safetensors"));
  EXPECT_EQ(fs::directory_iterator(dir_)->path().filename(), "m.safetensors");  // no temporary
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  nn::load_module(*b, path("m.safetensors"));
  EXPECT_TRUE(same_as(*b, snapshot(*a)));

  const std::string bytes = read_bytes(path("m.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);  // data starts 8-byte aligned
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["3.weight"]["dtype"], "F32");
  EXPECT_EQ(header["3.weight"]["shape"], nlohmann::json({2, 3, 3}));
  EXPECT_EQ(header["0.bias"]["shape"], nlohmann::json({8}));
  EXPECT_EQ(header.size(), 5u);  // four tensors and the metadata
}

TEST_F(Checkpoint, Float64IsWrittenAsF64) {
  auto a = make_net(1);
  a->to(kFloat64);
  nn::save_module(*a, path("m.safetensors"));
  const safetensors::File f = safetensors::load(path("m.safetensors"));
  for (const auto& [name, t] : f.tensors)
    EXPECT_EQ(t.dtype(), kFloat64) << name;
  auto b = make_net(2);
  EXPECT_THROW(nn::load_module(*b, path("m.safetensors")), Error);  // b is float32
  b->to(kFloat64);
  nn::load_module(*b, path("m.safetensors"));
  EXPECT_TRUE(same_as(*b, snapshot(*a)));
}

TEST_F(Checkpoint, MismatchedModuleNamesMissingAndUnexpectedKeys) {
  auto a = make_net(1);
  nn::save_module(*a, path("m.safetensors"));
  Generator gen(3);
  nn::Sequential other{
      std::make_shared<nn::LinearImpl>(3, 8, gen),
      std::make_shared<nn::ConvTranspose1dImpl>(nn::ConvTranspose1dOptions(2, 3, 3), gen)};
  const auto before = snapshot(*other);
  try {
    nn::load_module(other, path("m.safetensors"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing keys [1.weight, 1.bias]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected keys [3.bias, 3.weight]"), std::string::npos) << msg;
  }
  EXPECT_TRUE(same_as(*other, before));
}

TEST_F(Checkpoint, MismatchedShapeChangesNothing) {
  auto a = make_net(1);
  nn::save_module(*a, path("m.safetensors"));
  Generator gen(3);
  nn::Sequential wider{
      std::make_shared<nn::LinearImpl>(3, 8, gen), std::make_shared<nn::ReLUImpl>(),
      std::make_shared<nn::UnflattenImpl>(1, Shape{2, 4}),
      std::make_shared<nn::ConvTranspose1dImpl>(nn::ConvTranspose1dOptions(2, 3, 5), gen)};
  const auto before = snapshot(*wider);
  try {
    nn::load_module(wider, path("m.safetensors"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'3.weight' has shape [2, 3, 3] in the checkpoint but "
                                         "[2, 3, 5] in the module"),
              std::string::npos)
        << e.what();
  }
  // 0.weight and 0.bias matched and come first, yet were not loaded: all or nothing.
  EXPECT_TRUE(same_as(*wider, before));
}

struct BadFile {
  const char* name;
  std::string bytes;
  const char* message;  // a piece of the expected error
};

TEST_F(Checkpoint, BadFilesGiveClearErrorsAndChangeNothing) {
  auto a = make_net(1);
  nn::save_module(*a, path("good.safetensors"));
  const std::string good = read_bytes(path("good.safetensors"));
  const std::string f32x2 = R"({"dtype":"F32","shape":[2],"data_offsets":)";
  const std::vector<BadFile> cases = {
      {"empty", "", "shorter than the 8-byte header length"},
      {"truncated_length", good.substr(0, 5), "shorter than the 8-byte header length"},
      {"truncated_header", good.substr(0, 40), "runs past the end"},
      {"truncated_data", good.substr(0, good.size() - 4), "run past the"},
      {"trailing_bytes", good + "1234", "bytes after the last tensor belong to no tensor"},
      {"huge_header_length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}",
       "exceeds the limit"},
      {"bad_json", make_file("{\"a\": [1, 2", ""), "not valid JSON"},
      {"not_an_object", make_file("[1, 2]  ", ""), "must be a JSON object"},
      {"out_of_range", make_file("{\"x\":" + f32x2 + "[0,8]}}", "1234"), "run past the 4-byte"},
      {"overlap",
       make_file("{\"x\":" + f32x2 + "[0,8]},\"y\":" + f32x2 + "[4,12]}}", "123456789012"),
       "overlaps tensor 'x'"},
      {"gap",
       make_file("{\"x\":" + f32x2 + "[0,8]},\"y\":" + f32x2 + "[12,20]}}", std::string(20, 'a')),
       "bytes [8, 12) of the data section belong to no tensor"},
      {"size_mismatch", make_file("{\"x\":" + f32x2 + "[0,4]}}", "1234"), "needs 8 bytes"},
      {"backwards_offsets", make_file("{\"x\":" + f32x2 + "[8,0]}}", "12345678"),
       "end before they begin"},
      {"negative_shape",
       make_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "12345678"),
       "must be a non-negative integer"},
      {"unsupported_dtype",
       make_file(R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "1234"),
       "dtype 'F16'"},
      {"missing_field", make_file(R"({"x":{"dtype":"F32","shape":[2]}})", ""),
       "no 'data_offsets' pair"},
      {"bad_metadata", make_file(R"({"__metadata__":{"format":3}})", ""), "must be a string"},
  };
  for (const BadFile& c : cases) {
    const std::string p = path(std::string(c.name) + ".safetensors");
    write_bytes(p, c.bytes);
    auto target = make_net(7);
    const auto before = snapshot(*target);
    try {
      nn::load_module(*target, p);
      ADD_FAILURE() << c.name << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
          << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << c.name << ": " << e.what();
    }
    EXPECT_TRUE(same_as(*target, before)) << c.name;
  }
  EXPECT_THROW(safetensors::load(path("does_not_exist.safetensors")), Error);
}

TEST_F(Checkpoint, SaveFailsCleanly) {
  auto a = make_net(1);
  EXPECT_THROW(nn::save_module(*a, path("no_such_dir/m.safetensors")), Error);
  EXPECT_THROW(safetensors::save(path("d.safetensors"), {{"x", ones({1})}, {"x", ones({1})}}, {}),
               Error);
  EXPECT_TRUE(fs::is_empty(dir_));  // neither the file nor a temporary
  // Overwriting keeps the old file until the new one is complete.
  nn::save_module(*a, path("m.safetensors"));
  nn::save_module(*make_net(2), path("m.safetensors"));
  auto b = make_net(3);
  nn::load_module(*b, path("m.safetensors"));
  EXPECT_TRUE(same_as(*b, snapshot(*make_net(2))));
}

TEST_F(Checkpoint, EmptyAndZeroSizedTensors) {
  safetensors::save(path("z.safetensors"), {{"empty", zeros({0, 3})}, {"one", ones({1})}},
                    {{"format", "pt"}});
  const auto f = safetensors::load(path("z.safetensors"));
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST_F(Checkpoint, OptimizerRoundTripResumesIdentically) {
  auto run = [](nn::Module& net, optim::Optimizer& opt, int steps, uint64_t seed) {
    Generator gen(seed);
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      const Tensor x = randn({4, 3}, gen);
      nn::mse_loss(net.forward(x), zeros({4, 3, 9})).backward();
      opt.step();
    }
  };
  auto a = make_net(1);
  optim::Adam adam_a(a->parameters(), optim::AdamOptions(0.01).amsgrad(true));
  run(*a, adam_a, 3, 100);
  nn::save_module(*a, path("m.safetensors"));
  nn::save_optimizer(adam_a, path("o.safetensors"), {{"step", "3"}});

  auto b = make_net(5);
  optim::Adam adam_b(b->parameters(), optim::AdamOptions(0.5).amsgrad(true));
  nn::load_module(*b, path("m.safetensors"));
  const auto meta = nn::load_optimizer(adam_b, path("o.safetensors"));
  EXPECT_EQ(meta.at("step"), "3");
  EXPECT_EQ(meta.at("optimizer"), "Adam");
  EXPECT_EQ(adam_b.lr(), 0.01);
  run(*a, adam_a, 2, 200);
  run(*b, adam_b, 2, 200);
  EXPECT_TRUE(same_as(*b, snapshot(*a)));

  const auto header_keys = [&] {
    std::vector<std::string> keys;
    for (const auto& [k, t] : safetensors::load(path("o.safetensors")).tensors)
      keys.push_back(k);
    return keys;
  }();
  EXPECT_NE(std::find(header_keys.begin(), header_keys.end(), "optimizer.state.0.exp_avg"),
            header_keys.end());
  EXPECT_NE(std::find(header_keys.begin(), header_keys.end(), "optimizer.state.3.step"),
            header_keys.end());

  // Wrong optimizer type, a module file given as optimizer state: errors, nothing changes.
  optim::SGD sgd(b->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_THROW(nn::load_optimizer(sgd, path("o.safetensors")), Error);
  EXPECT_THROW(nn::load_optimizer(adam_b, path("m.safetensors")), Error);
  EXPECT_EQ(sgd.lr(), 0.1);
}

}  // namespace
}  // namespace tgrad
