// Data loading, as torch.utils.data for tensors: TensorDataset (tensors sharing their first dim)
// and DataLoader (batches in order, or shuffled from a seed and reshuffled every epoch, with
// drop_last). Batches are copies gathered with index_select, so a shuffled batch is contiguous.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/ops.h"
#include "core/random.h"

namespace tgrad::data {

// Rows i of every tensor form example i; every tensor has the same size(0).
class TensorDataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const { return size_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

// DataLoaderOptions().batch_size(32).shuffle(true).drop_last(false).seed(0).
struct DataLoaderOptions {
  TGRAD_ARG(int64_t, batch_size) = 1;
  TGRAD_ARG(bool, shuffle) = false;
  TGRAD_ARG(bool, drop_last) = false;
  TGRAD_ARG(uint64_t, seed) = 0;
};

// for (const std::vector<Tensor>& batch : loader) { ... }: one pass over the dataset per
// range-for. With shuffle, each pass draws a new permutation from a Generator seeded once with
// options.seed (Fisher-Yates), so a run is reproducible and epochs differ.
class DataLoader {
 public:
  DataLoader(TensorDataset dataset, const DataLoaderOptions& options);

  // Batches per epoch.
  int64_t size() const;

  class Iterator {
   public:
    Iterator(const DataLoader* loader, int64_t batch) : loader_(loader), batch_(batch) {}
    std::vector<Tensor> operator*() const { return loader_->batch(batch_); }
    Iterator& operator++() {
      ++batch_;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return batch_ != other.batch_; }

   private:
    const DataLoader* loader_;
    int64_t batch_;
  };
  // Starts an epoch: with shuffle, draws the epoch's permutation.
  Iterator begin();
  Iterator end() const { return Iterator(this, size()); }

  // Batch b of the current epoch: one tensor per dataset tensor.
  std::vector<Tensor> batch(int64_t b) const;

 private:
  TensorDataset dataset_;
  DataLoaderOptions options_;
  Generator generator_;
  std::vector<int64_t> order_;
};

}  // namespace tgrad::data
