// The tape: each differentiable op that sees an input needing a gradient records a Node (its
// inputs' edges, a backward closure holding only what it saved, the versions of the tensors it
// saved, a sequence number). backward() walks the nodes reachable from the root in decreasing
// sequence number, without recursion, and graphs are released without recursion too, so a chain
// of millions of nodes is fine. docs/architecture.md describes the engine; docs/design.md,
// "Saved tensors and in-place writes", why saved versions are checked.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tgrad {

// Which inputs of a node want a gradient; a backward function computes only those.
using GradMask = std::vector<bool>;
// Given dy (the gradient of the node's output) and the mask, returns one gradient per input
// (undefined where the mask is false), each with its input's shape. Formulas are written with
// differentiable ops, so that with create_graph the backward is itself recorded.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& dy, const GradMask& mask)>;

// What an op records: its backward function and every tensor that function captured. Captured
// inputs keep their history (double backward differentiates through them); an op that needs its
// own output captures it detached (a captured output holding its own node would be a cycle) and
// recomputes it from the input when grad mode is on during backward.
struct Formula {
  BackwardFn fn;
  std::vector<Tensor> saved;
};

// A saved tensor's version counter and its count when saved: backward refuses to run a node
// whose saved tensor was written in place since.
struct SavedVersion {
  std::shared_ptr<VersionCounter> counter;
  uint64_t version = 0;
  Shape shape;
};

// Where an input's gradient goes: into the node that produced it, or into a leaf's .grad.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool wants_grad() const { return node != nullptr || leaf != nullptr; }
};

struct Node {
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Hands the nodes and tensors it holds to an iterative release (see release_node), so that
  // freeing a long chain never recurses once per node.
  ~Node();

  std::string name;  // the op, e.g. "conv_transpose2d"
  uint64_t sequence_nr = 0;
  std::string recorded_in;  // anomaly mode only: the RecordScope path and input shapes
  std::vector<Edge> inputs;
  BackwardFn backward;  // emptied (saved tensors freed) after a backward without retain_graph
  std::vector<SavedVersion> saved;
  bool released = false;
};

// Drops one reference to a node; when it was the last, the node is destroyed by a loop on this
// thread rather than by nested destructors. TensorImpl's destructor calls it for its grad_fn.
void release_node(std::shared_ptr<Node>&& node);

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
// LibTorch's InferenceMode: no recording in its scope, for inference loops. (tgrad has no
// separate inference tensors; this is NoGradGuard under LibTorch's name, and
// is_inference_mode_enabled() tells whether one is active on this thread.)
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  bool previous_grad_;
  bool previous_inference_;
};
bool is_inference_mode_enabled();

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
Tensor record(const char* name, Tensor y, const std::vector<Tensor>& inputs, Formula formula);

// Runs reverse mode from `root` with upstream gradient `gradient` (ones for a scalar when
// undefined). Leaf gradients are written only once every node has run, so a throw leaves
// every .grad as it was. Several threads may run backward at once through shared leaves (one
// model, several batches): each leaf's .grad then receives the sum of every contribution, added
// under a lock in the order the threads finish (so the float rounding of that sum may depend on
// the order; each thread's own contribution does not). Every leaf's .grad is its own storage.
void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph,
                  bool create_graph = false);

// The gradients of `outputs` with respect to `inputs` (like torch.autograd.grad), without
// touching any .grad. Each output gets its grad_outputs entry (ones for an undefined entry of a
// scalar output). Returns one tensor per input, undefined where no path reaches it.
// retain_graph defaults to create_graph; with create_graph the results carry history and can be
// differentiated again (gradient penalties, gradgradcheck).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {},
                         std::optional<bool> retain_graph = std::nullopt,
                         bool create_graph = false);

}  // namespace tgrad
