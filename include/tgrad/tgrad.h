// The umbrella header: everything a program embedding tgrad needs.
//   #include <tgrad/tgrad.h>
// Tensors and devices, the differentiable ops, autograd, gradcheck, and the nn modules,
// losses, optimizers and checkpoints.
#pragma once

#include "core/autograd.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/ops_shape.h"
#include "core/random.h"
#include "core/tensor.h"
#include "layers/nn.h"
