// Builds the decoders from tgrad::nn modules; names follow torch.nn.Sequential ("0.weight",
// "3.bias", ...), so decoder.safetensors loads into the same Sequential in PyTorch.
#include "model.h"

#include "layers/activation.h"
#include "layers/conv_transpose.h"
#include "layers/linear.h"

namespace decoder {

using namespace tgrad::nn;

std::shared_ptr<SequentialImpl> make_decoder(Mode mode, tgrad::Generator& gen) {
  auto net = std::make_shared<SequentialImpl>();
  if (mode == Mode::image2d) {
    const int64_t c0 = 64, c1 = 32, c2 = 16;
    net->push_back(std::make_shared<LinearImpl>(input_features(mode), c0 * 4 * 4, gen));
    net->push_back(std::make_shared<LeakyReLUImpl>(0.1));
    net->push_back(std::make_shared<UnflattenImpl>(1, tgrad::Shape{c0, 4, 4}));
    net->push_back(std::make_shared<ConvTranspose2dImpl>(
        ConvTranspose2dOptions(c0, c1, 4).stride(2).padding(1), gen));
    net->push_back(std::make_shared<LeakyReLUImpl>(0.1));
    net->push_back(std::make_shared<ConvTranspose2dImpl>(
        ConvTranspose2dOptions(c1, c2, 4).stride(2).padding(1), gen));
    net->push_back(std::make_shared<LeakyReLUImpl>(0.1));
    net->push_back(std::make_shared<ConvTranspose2dImpl>(
        ConvTranspose2dOptions(c2, 3, 4).stride(2).padding(1), gen));
    net->push_back(std::make_shared<SigmoidImpl>());
  } else {
    const int64_t c0 = 32, c1 = 32, c2 = 16;
    net->push_back(std::make_shared<LinearImpl>(input_features(mode), c0 * 8, gen));
    net->push_back(std::make_shared<LeakyReLUImpl>(0.1));
    net->push_back(std::make_shared<UnflattenImpl>(1, tgrad::Shape{c0, 8}));
    net->push_back(std::make_shared<ConvTranspose1dImpl>(
        ConvTranspose1dOptions(c0, c1, 4).stride(2).padding(1), gen));
    net->push_back(std::make_shared<LeakyReLUImpl>(0.1));
    net->push_back(std::make_shared<ConvTranspose1dImpl>(
        ConvTranspose1dOptions(c1, c2, 4).stride(2).padding(1), gen));
    net->push_back(std::make_shared<LeakyReLUImpl>(0.1));
    net->push_back(std::make_shared<ConvTranspose1dImpl>(
        ConvTranspose1dOptions(c2, 1, 4).stride(2).padding(1), gen));
    net->push_back(std::make_shared<TanhImpl>());
  }
  return net;
}

}  // namespace decoder
