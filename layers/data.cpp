// TensorDataset and DataLoader: checks, the epoch's order, and batches gathered by index_select.
#include "layers/data.h"

#include <numeric>
#include <utility>

#include "core/autograd.h"

namespace tgrad::data {

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  TGRAD_CHECK(!tensors_.empty(), "TensorDataset: no tensors given");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TGRAD_CHECK(tensors_[i].defined() && tensors_[i].dim() >= 1, "TensorDataset: tensor ", i,
                " must be defined and at least 1-D");
    TGRAD_CHECK(tensors_[i].size(0) == tensors_[0].size(0), "TensorDataset: tensor ", i, " has ",
                tensors_[i].size(0), " rows but tensor 0 has ", tensors_[0].size(0), " (shapes ",
                tensors_[i].shape(), " and ", tensors_[0].shape(), ")");
  }
  size_ = tensors_[0].size(0);
}

DataLoader::DataLoader(TensorDataset dataset, const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), options_(options), generator_(options.seed()) {
  TGRAD_CHECK(options_.batch_size() > 0, "DataLoader: batch_size=", options_.batch_size(),
              " must be positive");
  order_.resize(static_cast<size_t>(dataset_.size()));
  std::iota(order_.begin(), order_.end(), int64_t{0});
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_.size(), b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  if (options_.shuffle()) {
    std::iota(order_.begin(), order_.end(), int64_t{0});
    for (size_t i = order_.size(); i > 1; --i) {
      const auto j = static_cast<size_t>(generator_.next_u64() % i);
      std::swap(order_[i - 1], order_[j]);
    }
  }
  return Iterator(this, 0);
}

std::vector<Tensor> DataLoader::batch(int64_t b) const {
  TGRAD_CHECK(b >= 0 && b < size(), "DataLoader::batch: batch ", b, " is out of range for ", size(),
              " batches");
  const int64_t first = b * options_.batch_size();
  const int64_t count = std::min(options_.batch_size(), dataset_.size() - first);
  const std::vector<int64_t> rows(order_.begin() + first, order_.begin() + first + count);
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (const Tensor& t : dataset_.tensors()) {
    const Tensor index = from_vector(rows, {count}, TensorOptions(kInt64).device(t.device()));
    out.push_back(index_select(t, 0, index));
  }
  return out;
}

}  // namespace tgrad::data
