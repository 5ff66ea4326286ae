// nn::Module and the layers: registration and dotted names, children, train/eval, zero_grad,
// in-place dtype moves, Sequential/Unflatten/Flatten, and option validation of the layers.
#include <gtest/gtest.h>

#include <string>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using testing::kFloat64Tight;
using testing::tensors_close;

std::vector<std::string> names_of(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named)
    out.push_back(n);
  return out;
}

// A module with a nested Sequential, as a user would write one.
class TwoPart : public nn::Module {
 public:
  TwoPart() : Module("TwoPart") {
    scale = register_parameter("scale", ones({1}));
    decoder = register_module("decoder",
                              std::make_shared<nn::SequentialImpl>(std::initializer_list<nn::ModulePtr>{
                                  std::make_shared<nn::LinearImpl>(3, 4), std::make_shared<nn::ReLUImpl>(),
                                  std::make_shared<nn::LinearImpl>(4, 2)}));
  }
  Tensor forward(const Tensor& x) override { return decoder->forward(x) * scale; }
  Tensor scale;
  std::shared_ptr<nn::SequentialImpl> decoder;
};

TEST(Module, DottedNamesInRegistrationOrder) {
  TwoPart m;
  EXPECT_EQ(names_of(m.named_parameters()),
            (std::vector<std::string>{"scale", "decoder.0.weight", "decoder.0.bias",
                                      "decoder.2.weight", "decoder.2.bias"}));
  EXPECT_EQ(names_of(m.named_parameters(false)), (std::vector<std::string>{"scale"}));
  EXPECT_EQ(m.parameters().size(), 5u);
  ASSERT_EQ(m.named_children().size(), 1u);
  EXPECT_EQ(m.named_children()[0].first, "decoder");
  EXPECT_EQ(m.decoder->children().size(), 3u);
  EXPECT_EQ((*m.decoder)[1]->type_name(), "ReLU");
  EXPECT_THROW((*m.decoder)[3], Error);
  for (const Tensor& p : m.parameters())
    EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(m.forward(ones({5, 3})).shape(), (Shape{5, 2}));
}

TEST(Module, RejectsBadRegistrations) {
  class Bad : public nn::Module {
   public:
    Bad() : Module("Bad") {}
    void add(const std::string& name) { register_parameter(name, zeros({1})); }
    void add_module(const std::string& name) {
      register_module(name, std::make_shared<nn::ReLUImpl>());
    }
  } m;
  m.add("w");
  EXPECT_THROW(m.add("w"), Error);
  EXPECT_THROW(m.add_module("w"), Error);
  EXPECT_THROW(m.add("a.b"), Error);
  EXPECT_THROW(m.add(""), Error);
  EXPECT_THROW(m.forward(zeros({1})), Error);  // no single-input forward
  try {
    m.add("w");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Bad: a parameter named 'w'"), std::string::npos);
  }
}

TEST(Module, TrainEvalPropagates) {
  TwoPart m;
  EXPECT_TRUE(m.is_training());
  m.eval();
  EXPECT_FALSE(m.is_training());
  for (const auto& c : m.decoder->children())
    EXPECT_FALSE(c->is_training());
  m.train();
  EXPECT_TRUE((*m.decoder)[2]->is_training());
}

TEST(Module, ZeroGradClearsEveryGradient) {
  TwoPart m;
  sum(m.forward(ones({2, 3}))).backward();
  for (const Tensor& p : m.parameters())
    EXPECT_TRUE(p.grad().defined());
  m.zero_grad();
  for (const Tensor& p : m.parameters())
    EXPECT_FALSE(p.grad().defined());
}

TEST(Module, ToDtypeMovesInPlaceKeepingHandles) {
  TwoPart m;
  const Tensor handle = m.decoder->parameters()[0];  // held elsewhere, e.g. by an optimizer
  const std::vector<double> before = handle.to_vector<double>();
  sum(m.forward(ones({2, 3}))).backward();
  m.to(kFloat64);
  EXPECT_EQ(handle.dtype(), kFloat64);
  EXPECT_EQ(handle.to_vector<double>(), before);  // float32 -> float64 is exact
  EXPECT_EQ(handle.grad().dtype(), kFloat64);
  EXPECT_TRUE(handle.requires_grad());
  EXPECT_EQ(m.forward(ones({2, 3}, kFloat64)).dtype(), kFloat64);
}

TEST(Module, ToUnavailableDeviceChangesNothing) {
  TwoPart m;
  // Without CUDA any cuda device is unavailable; with it, an index past the last device is.
  const Device unavailable(kCUDA, cuda_is_available() ? cuda_device_count() : 0);
  EXPECT_THROW(m.to(unavailable), Error);
  for (const Tensor& p : m.parameters())
    EXPECT_TRUE(p.device().is_cpu());
}

TEST(Module, ToCudaAndBack) {
  TGRAD_SKIP_WITHOUT_CUDA();
  TwoPart m;
  const Tensor handle = m.parameters()[1];
  const Tensor x = randn({4, 3});
  const Tensor y_cpu = m.forward(x);
  m.to(Device(kCUDA));
  EXPECT_TRUE(handle.is_cuda());
  // cuBLAS and Eigen sum in different orders: float32 rounding of a 3-4 term dot product.
  EXPECT_TRUE(tensors_close(m.forward(x.cuda()), y_cpu, {1e-5, 1e-5, 0.0}, "TwoPart on cuda"));
  m.to(Device(kCPU));
  EXPECT_TRUE(handle.device().is_cpu());
}

TEST(ConvTranspose, ForwardEqualsFunctionalCall) {
  nn::ConvTranspose2d conv(nn::ConvTranspose2dOptions(4, 6, {3, 2})
                               .stride({2, 1})
                               .padding(1)
                               .output_padding({1, 0})
                               .groups(2)
                               .dilation({1, 2}));
  EXPECT_EQ(conv->weight.shape(), (Shape{4, 3, 3, 2}));
  EXPECT_EQ(conv->bias.shape(), (Shape{6}));
  EXPECT_EQ(names_of(conv->named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  const Tensor x = randn({2, 4, 5, 3});
  const Tensor y = conv->forward(x);
  const Tensor expected = conv_transpose2d(x, conv->weight, conv->bias,
                                           ConvTranspose2dFuncOptions()
                                               .stride({2, 1})
                                               .padding(1)
                                               .output_padding({1, 0})
                                               .groups(2)
                                               .dilation({1, 2}));
  EXPECT_TRUE(tensors_close(y, expected, {}, "same call"));
  // (5-1)*2 - 2 + 1*(3-1) + 1 + 1 = 10; (3-1)*1 - 2 + 2*(2-1) + 0 + 1 = 3
  EXPECT_EQ(y.shape(), (Shape{2, 6, 10, 3}));

  nn::ConvTranspose1d conv1(nn::ConvTranspose1dOptions(3, 2, 4).stride(2).padding(1).bias(false));
  EXPECT_FALSE(conv1->bias.defined());
  EXPECT_EQ(conv1->parameters().size(), 1u);
  EXPECT_EQ(conv1->forward(randn({1, 3, 8})).shape(), (Shape{1, 2, 16}));
}

TEST(ConvTranspose, ValidatesOptionsWithClearMessages) {
  auto message = [](auto make) -> std::string {
    try {
      make();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  using O2 = nn::ConvTranspose2dOptions;
  using O1 = nn::ConvTranspose1dOptions;
  EXPECT_EQ(message([] { nn::ConvTranspose2d(O2(4, 6, 3).groups(4)); }),
            "ConvTranspose2d: out_channels=6 must be divisible by groups=4");
  EXPECT_EQ(message([] { nn::ConvTranspose2d(O2(3, 6, 3).groups(2)); }),
            "ConvTranspose2d: in_channels=3 must be divisible by groups=2");
  EXPECT_EQ(message([] {
              nn::ConvTranspose2d(O2(4, 6, {3, 0}));
            }),
            "ConvTranspose2d: kernel_size[1]=0 must be positive");
  EXPECT_EQ(message([] {
              nn::ConvTranspose2d(O2(4, 6, 3).stride({2, 2}).output_padding({1, 3}));
            }),
            "ConvTranspose2d: output_padding[1]=3 must be smaller than stride[1]=2 or "
            "dilation[1]=1");
  EXPECT_EQ(message([] { nn::ConvTranspose1d(O1(4, 6, 3).padding(-1)); }),
            "ConvTranspose1d: padding[0]=-1 must be non-negative");
  EXPECT_EQ(message([] { nn::ConvTranspose1d(O1(0, 6, 3)); }),
            "ConvTranspose1d: in_channels=0 must be positive");
  EXPECT_EQ(message([] { nn::ConvTranspose1d(O1(2, 2, 3).dilation(0)); }),
            "ConvTranspose1d: dilation[0]=0 must be positive");
  EXPECT_EQ(message([] { nn::ConvTranspose1d(O1(2, 2, 3).stride(0)); }),
            "ConvTranspose1d: stride[0]=0 must be positive");
  EXPECT_THROW(nn::Linear(3, 0), Error);
  // A wrong input shape is reported by the op.
  nn::ConvTranspose2d conv(O2(4, 6, 3));
  EXPECT_THROW(conv->forward(randn({2, 5, 4, 4})), Error);
}

TEST(Shapes, UnflattenAndFlatten) {
  nn::Unflatten unflatten(1, Shape{2, -1, 3});
  const Tensor x = arange(48.0).reshape({2, 24});
  const Tensor y = unflatten->forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 4, 3}));
  EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(nn::Flatten()->forward(y).shape(), (Shape{2, 24}));
  EXPECT_EQ(nn::Flatten(0, -2)->forward(y).shape(), (Shape{16, 3}));
  EXPECT_EQ(nn::Unflatten(-1, Shape{4, 6})->forward(x).shape(), (Shape{2, 4, 6}));
  EXPECT_THROW(nn::Unflatten(1, Shape{5, 5})->forward(x), Error);
  EXPECT_THROW(nn::Unflatten(2, Shape{24})->forward(x), Error);
  EXPECT_THROW(nn::Unflatten(1, Shape{-1, -1}), Error);
  EXPECT_THROW(nn::Flatten(2, 1)->forward(y), Error);
}

TEST(Activations, MatchTheirOps) {
  const Tensor x = from_vector(std::vector<float>{-2.0f, -0.5f, 0.0f, 0.5f, 2.0f}, {5});
  EXPECT_TRUE(tensors_close(nn::ReLU()->forward(x), relu(x), {}, "ReLU"));
  EXPECT_TRUE(tensors_close(nn::LeakyReLU(0.2)->forward(x), leaky_relu(x, 0.2), {}, "LeakyReLU"));
  EXPECT_TRUE(tensors_close(nn::Tanh()->forward(x), tanh(x), {}, "Tanh"));
  EXPECT_TRUE(tensors_close(nn::Sigmoid()->forward(x), sigmoid(x), {}, "Sigmoid"));
  EXPECT_FLOAT_EQ(nn::LeakyReLU(0.2)->forward(x).to_vector<float>()[0], -0.4f);
}

TEST(Layers, GradcheckThroughADecoderInFloat64) {
  Generator gen(3);
  nn::Sequential net{std::make_shared<nn::LinearImpl>(3, 8, gen), std::make_shared<nn::TanhImpl>(),
                     std::make_shared<nn::UnflattenImpl>(1, Shape{2, 2, 2}),
                     std::make_shared<nn::ConvTranspose2dImpl>(
                         nn::ConvTranspose2dOptions(2, 2, 3).stride(2).padding(1), gen),
                     std::make_shared<nn::SigmoidImpl>()};
  net->to(kFloat64);
  // gradcheck perturbs copies of its inputs, so it checks d/dx through the modules here; the
  // parameters' own gradients are the ops' (checked by the op tests).
  std::vector<Tensor> inputs{randn({2, 3}, gen, kFloat64).requires_grad_()};
  GradcheckOptions opt;
  opt.name = "Linear-Tanh-Unflatten-ConvTranspose2d-Sigmoid";
  const auto result =
      gradcheck([&](const std::vector<Tensor>& in) { return net->forward(in[0]); }, inputs, opt);
  EXPECT_TRUE(result.ok) << result.report;
}

}  // namespace
}  // namespace tgrad
