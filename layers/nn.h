// The nn umbrella header: modules, init, losses, optimizers, schedulers and checkpoints.
#pragma once

#include "layers/activation.h"
#include "layers/checkpoint.h"
#include "layers/clip_grad.h"
#include "layers/container.h"
#include "layers/conv.h"
#include "layers/conv_transpose.h"
#include "layers/data.h"
#include "layers/dropout.h"
#include "layers/init.h"
#include "layers/linear.h"
#include "layers/loss.h"
#include "layers/lr_scheduler.h"
#include "layers/module.h"
#include "layers/normalization.h"
#include "layers/optimizer.h"
#include "layers/safetensors.h"
