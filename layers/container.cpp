// Sequential, Unflatten, Flatten.
#include "layers/container.h"

#include <algorithm>
#include <ostream>
#include <string>

namespace tgrad::nn {

SequentialImpl::SequentialImpl(std::initializer_list<ModulePtr> modules) : SequentialImpl() {
  for (const ModulePtr& m : modules)
    push_back(m);
}

void SequentialImpl::push_back(ModulePtr module) {
  TGRAD_CHECK(module != nullptr, "Sequential::push_back: module ", size(), " is null");
  Module* raw = module.get();
  append(std::move(module), [raw](const Tensor& x) { return raw->forward(x); });
}

void SequentialImpl::append(ModulePtr module, std::function<Tensor(const Tensor&)> forward) {
  forwards_.reserve(forwards_.size() + 1);
  register_module(std::to_string(size()), std::move(module));
  forwards_.push_back(std::move(forward));  // cannot throw: capacity reserved
}

const ModulePtr& SequentialImpl::operator[](size_t i) const {
  TGRAD_CHECK(i < size(), "Sequential: index ", i, " is out of range for ", size(), " modules");
  return named_children()[i].second;
}

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& forward : forwards_)
    y = forward(y);
  return y;
}

UnflattenImpl::UnflattenImpl(int64_t dim, Shape sizes)
    : Module("Unflatten"), dim_(dim), sizes_(std::move(sizes)) {
  TGRAD_CHECK(!sizes_.empty(), "Unflatten: sizes must not be empty");
  int negative = 0;
  for (int64_t s : sizes_) {
    TGRAD_CHECK(s >= 0 || s == -1, "Unflatten: size ", s, " in ", sizes_, " is invalid");
    negative += s == -1;
  }
  TGRAD_CHECK(negative <= 1, "Unflatten: only one size may be -1, got ", sizes_);
}

Tensor UnflattenImpl::forward(const Tensor& x) {
  TGRAD_CHECK(x.defined(), "Unflatten: the input is undefined");
  const int64_t rank = x.dim();
  TGRAD_CHECK(dim_ >= -rank && dim_ < rank, "Unflatten: dim=", dim_,
              " is out of range for an input of shape ", x.shape());
  const auto d = static_cast<size_t>(dim_ < 0 ? dim_ + rank : dim_);
  int64_t known = 1;
  bool infer = false;
  for (int64_t s : sizes_) {
    if (s == -1) {
      infer = true;
    } else {
      known *= s;
    }
  }
  const int64_t n = x.shape()[d];
  TGRAD_CHECK(infer ? (known != 0 && n % known == 0) : known == n, "Unflatten: sizes ", sizes_,
              " do not multiply to size ", n, " of dim ", d, " of input shape ", x.shape());
  Shape out(x.shape().begin(), x.shape().begin() + static_cast<std::ptrdiff_t>(d));
  out.insert(out.end(), sizes_.begin(), sizes_.end());
  out.insert(out.end(), x.shape().begin() + static_cast<std::ptrdiff_t>(d) + 1, x.shape().end());
  return x.reshape(out);
}

FlattenImpl::FlattenImpl(int64_t start_dim, int64_t end_dim)
    : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}

Tensor FlattenImpl::forward(const Tensor& x) {
  TGRAD_CHECK(x.defined(), "Flatten: the input is undefined");
  const int64_t rank = std::max<int64_t>(x.dim(), 1);
  const int64_t s = start_dim_ < 0 ? start_dim_ + rank : start_dim_;
  const int64_t e = end_dim_ < 0 ? end_dim_ + rank : end_dim_;
  TGRAD_CHECK(s >= 0 && s < rank && e >= 0 && e < rank && s <= e, "Flatten: start_dim=", start_dim_,
              " and end_dim=", end_dim_, " are invalid for an input of shape ", x.shape());
  if (x.dim() == 0) return x.reshape({1});
  Shape out(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i)
    merged *= x.shape()[static_cast<size_t>(i)];
  out.push_back(merged);
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return x.reshape(out);
}

void FlattenImpl::pretty_print(std::ostream& stream) const {
  stream << "Flatten(start_dim=" << start_dim_ << ", end_dim=" << end_dim_ << ")";
}

}  // namespace tgrad::nn
