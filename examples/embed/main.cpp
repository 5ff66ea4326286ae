// embed: loads the 2-D decoder trained by examples/upsampling_decoder (decoder.safetensors)
// into the same nn::Sequential, decodes a disk, a ring and a square without recording
// gradients, and prints the output shape and a checksum.
#include <tgrad/tgrad.h>

#include <iostream>
#include <memory>

using namespace tgrad;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: embed DIR/decoder.safetensors\n";
    return 2;
  }
  try {
    // The demo's 2-D decoder: Linear -> (64, 4, 4) -> three stride-2 ConvTranspose2d layers
    // (4 -> 8 -> 16 -> 32 pixels). Children are named "0" ... "8", so the checkpoint's keys
    // ("0.weight", "3.bias", ...) match, as in torch.nn.Sequential.
    auto up = [](int64_t in, int64_t out) {
      return std::make_shared<nn::ConvTranspose2dImpl>(
          nn::ConvTranspose2dOptions(in, out, 4).stride(2).padding(1));
    };
    auto leaky = [] { return std::make_shared<nn::LeakyReLUImpl>(0.1); };
    nn::Sequential decoder{std::make_shared<nn::LinearImpl>(9, 64 * 4 * 4),
                           leaky(),
                           std::make_shared<nn::UnflattenImpl>(1, Shape{64, 4, 4}),
                           up(64, 32),
                           leaky(),
                           up(32, 16),
                           leaky(),
                           up(16, 3),
                           std::make_shared<nn::SigmoidImpl>()};
    nn::load_module(decoder, argv[1]);  // every name, shape and dtype is checked

    const Device device = cuda_is_available() ? Device(kCUDA) : Device(kCPU);
    decoder->to(device);

    // One row per shape, scaled as the demo scales them: kind (disk, ring, square as one-hot),
    // x, y, size (0 = centred, medium), then r, g, b.
    const Tensor params = from_vector<float>({1, 0, 0, 0, 0, 0, 1,  0, -1,  //
                                              0, 1, 0, 0, 0, 0, 0,  1, 0,   //
                                              0, 0, 1, 0, 0, 0, -1, 0, 1},
                                             {3, 9});
    NoGradGuard no_grad;  // inference: record no tape
    const Tensor images = decoder(params.to(device)).cpu();

    std::cout << "output shape [" << images.size(0) << ", " << images.size(1) << ", "
              << images.size(2) << ", " << images.size(3) << "] on " << device << "\n"
              << "checksum " << sum(images).item() << "\n";
  } catch (const Error& e) {
    std::cerr << "embed: " << e.what() << "\n";
    return 1;
  }
}
