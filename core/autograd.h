// The tape: each differentiable op that sees an input needing a gradient records a Node (its
// inputs' edges, a backward closure holding only what it saved, a sequence number). backward()
// walks the nodes reachable from the root in decreasing sequence number.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tgrad {

// Which inputs of a node want a gradient; a backward function computes only those.
using GradMask = std::vector<bool>;
// Given dy (the gradient of the node's output) and the mask, returns one gradient per input
// (undefined where the mask is false), each with its input's shape.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& dy, const GradMask& mask)>;

// Where an input's gradient goes: into the node that produced it, or into a leaf's .grad.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool wants_grad() const { return node != nullptr || leaf != nullptr; }
};

struct Node {
  std::string name;  // the op, e.g. "conv_transpose2d"
  uint64_t sequence_nr = 0;
  std::string recorded_in;  // anomaly mode only: the RecordScope path and input shapes
  std::vector<Edge> inputs;
  BackwardFn backward;  // emptied (saved tensors freed) after a backward without retain_graph
  bool released = false;
};

// Grad mode: thread-local, on by default. NoGradGuard turns recording off for its scope.
bool grad_mode_enabled();
void set_grad_mode(bool enabled);
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_mode_enabled()) { set_grad_mode(false); }
  ~NoGradGuard() { set_grad_mode(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(grad_mode_enabled()) { set_grad_mode(true); }
  ~EnableGradGuard() { set_grad_mode(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Anomaly mode (like torch.autograd.detect_anomaly): while on, each node remembers where it was
// recorded, and backward throws tgrad::Error at the first backward function that produces a
// NaN or Inf, naming the op and where it was recorded. It costs a host copy per gradient.
bool anomaly_mode_enabled();
void set_anomaly_mode(bool enabled);
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : previous_(anomaly_mode_enabled()) { set_anomaly_mode(true); }
  ~DetectAnomalyGuard() { set_anomaly_mode(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// Names the code that records ops in its scope ("decoder.2"), nested with '/'; anomaly reports
// quote the path. Cheap: a thread-local string stack.
class RecordScope {
 public:
  explicit RecordScope(const std::string& name);
  ~RecordScope();
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;
};
std::string current_record_scope();

// Records `y` as the output of op `name` with `inputs` when grad mode is on and an input
// requires grad; otherwise returns y untouched. Called by every differentiable op.
Tensor record(const char* name, Tensor y, const std::vector<Tensor>& inputs, BackwardFn backward);

// Runs reverse mode from `root` with upstream gradient `gradient` (ones for a scalar when
// undefined). Leaf gradients are written only once every node has run, so a throw leaves
// every .grad as it was.
void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph);

// The gradients of `outputs` with respect to `inputs` (like torch.autograd.grad), without
// touching any .grad. Each output gets its grad_outputs entry (ones for an undefined entry of a
// scalar output). Returns one tensor per input, undefined where no path reaches it.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false);

}  // namespace tgrad
