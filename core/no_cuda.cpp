// Linked instead of cuda/ in a build without CUDA: there is no CUDA backend to register.
#include "core/backend.h"

namespace tgrad {

Backend* cuda_backend() {
  return nullptr;
}

}  // namespace tgrad
