// A short in-process training run: a small Linear -> ConvTranspose2d -> ConvTranspose2d decoder
// learns four 8x8 two-channel patterns (stripes, checkerboard, a square) from one-hot codes with
// Adam and a cosine schedule; the loss must fall 10-fold.
#include <gtest/gtest.h>

#include <vector>

#include "core/ops.h"
#include "layers/nn.h"

namespace tgrad {
namespace {

TEST(Training, SmallDecoderLossFalls) {
  Generator gen(17);
  nn::Sequential net{std::make_shared<nn::LinearImpl>(4, 8 * 2 * 2, gen),
                     std::make_shared<nn::ReLUImpl>(),
                     std::make_shared<nn::UnflattenImpl>(1, Shape{8, 2, 2}),
                     std::make_shared<nn::ConvTranspose2dImpl>(
                         nn::ConvTranspose2dOptions(8, 8, 4).stride(2).padding(1), gen),
                     std::make_shared<nn::LeakyReLUImpl>(0.1),
                     std::make_shared<nn::ConvTranspose2dImpl>(
                         nn::ConvTranspose2dOptions(8, 2, 4).stride(2).padding(1), gen),
                     std::make_shared<nn::SigmoidImpl>()};
  std::vector<float> xs(16 * 4, 0.0f), ts;
  for (int i = 0; i < 16; ++i) {
    const int c = i % 4;
    xs[static_cast<size_t>(i * 4 + c)] = 1.0f;
    for (int ch = 0; ch < 2; ++ch) {
      for (int y = 0; y < 8; ++y) {
        for (int x = 0; x < 8; ++x) {
          const bool on = c == 0   ? y % 2 == 0
                          : c == 1 ? x % 2 == ch
                          : c == 2 ? (x + y) % 2 == 0
                                   : (x >= 2 && x < 6 && y >= 2 && y < 6);
          ts.push_back(on ? 0.9f : 0.1f);
        }
      }
    }
  }
  const Tensor x = from_vector(xs, {16, 4});
  const Tensor target = from_vector(ts, {16, 2, 8, 8});
  optim::Adam adam(net->parameters(), optim::AdamOptions(1e-2));
  optim::CosineAnnealingLR schedule(adam, 150);
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 150; ++step) {
    adam.zero_grad();
    const Tensor loss = nn::mse_loss(net->forward(x), target);
    loss.backward();
    adam.step();
    schedule.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  EXPECT_LT(last, first / 10) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace tgrad
