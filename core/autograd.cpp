// The tape engine: recording nodes, running them in decreasing sequence number so that a node
// runs only after every consumer of its output has delivered its gradient, checking the versions
// of saved tensors, accumulating into leaves under a lock, and releasing graphs iteratively.
#include "core/autograd.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/ops.h"
#include "core/ops_internal.h"

namespace tgrad {

namespace {

thread_local bool g_grad_mode = true;
thread_local bool g_inference_mode = false;
thread_local bool g_anomaly_mode = false;
thread_local std::vector<std::string> g_scopes;
std::atomic<uint64_t> g_next_sequence_nr{0};

// Leaf .grad fields are read, summed and replaced under this lock, so that threads running
// backward through shared parameters each add their whole contribution.
std::mutex g_leaf_mutex;

// The queue of the release loop running on this thread, if one is: nodes released while it runs
// wait there instead of being destroyed inside the destructor that released them. A plain pointer
// (to the loop's local vector), so that it has no destructor to order against static tensors
// freed at exit.
thread_local std::vector<std::shared_ptr<Node>>* g_release_queue = nullptr;

Tensor accumulate(const Tensor& total, const Tensor& g) {
  return total.defined() ? add(total, g) : g;
}

struct NodeOrder {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr < b->sequence_nr;
  }
};

// The result of one traversal: gradients for leaves and for the outputs of requested nodes.
struct Traversal {
  std::unordered_map<TensorImpl*, std::pair<std::shared_ptr<TensorImpl>, Tensor>> leaves;
  std::unordered_map<Node*, Tensor> captured;
};

// Anomaly mode: the first non-finite gradient names its op and where it was recorded.
void check_finite(const Node& node, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    const std::vector<double> v = grads[i].to_vector<double>();
    for (size_t j = 0; j < v.size(); ++j) {
      TGRAD_CHECK(std::isfinite(v[j]), "anomaly: the backward of '", node.name, "' (op #",
                  node.sequence_nr, ", recorded ", node.recorded_in, ") produced ", v[j],
                  " in the gradient of input ", i, " at element ", j);
    }
  }
}

// A saved tensor written in place since it was saved would make the formula silently wrong.
void check_saved_versions(const Node& node) {
  for (size_t i = 0; i < node.saved.size(); ++i) {
    const SavedVersion& s = node.saved[i];
    const uint64_t now = s.counter->get();
    TGRAD_CHECK(now == s.version, "backward: a tensor saved by '", node.name, "' (op #",
                node.sequence_nr, "; saved tensor ", i, " of shape ", s.shape,
                ") was modified by an in-place operation (copy_, fill_, an optimizer step, "
                "set_data or Module::to) after it was saved: its version is ",
                now, ", expected ", s.version,
                ". Run backward before the write, or write into a clone()");
  }
}

Traversal traverse(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads,
                   bool retain_graph, bool create_graph, const std::unordered_set<Node*>& capture) {
  // Backward formulas are recorded only when asked for (create_graph): then the gradients
  // carry history and can be differentiated again.
  const bool previous_mode = g_grad_mode;
  g_grad_mode = create_graph;
  struct Restore {
    bool mode;
    ~Restore() { g_grad_mode = mode; }
  } restore{previous_mode};

  Traversal out;
  std::unordered_map<Node*, Tensor> pending;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, NodeOrder> ready;
  std::vector<std::shared_ptr<Node>> visited;

  auto deliver = [&](const Edge& edge, const Tensor& g) {
    if (edge.node) {
      auto it = pending.find(edge.node.get());
      if (it == pending.end()) {
        pending.emplace(edge.node.get(), g);
        ready.push(edge.node);
      } else {
        it->second = accumulate(it->second, g);
      }
    } else if (edge.leaf) {
      auto& slot = out.leaves[edge.leaf.get()];
      slot.first = edge.leaf;
      slot.second = accumulate(slot.second, g);
    }
  };

  for (size_t i = 0; i < roots.size(); ++i) {
    Edge root;
    if (roots[i].grad_fn()) {
      root.node = roots[i].grad_fn();
    } else {
      root.leaf = roots[i].impl_ptr();
    }
    deliver(root, root_grads[i]);
  }

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    auto it = pending.find(node.get());
    const Tensor dy = it->second;
    pending.erase(it);
    TGRAD_CHECK(!node->released,
                "backward: trying to backward through the graph a second time (op '", node->name,
                "', recorded as #", node->sequence_nr,
                "); its saved tensors were freed by the first backward. Pass retain_graph=true "
                "to that call to keep them");
    check_saved_versions(*node);
    if (capture.count(node.get())) out.captured[node.get()] = dy;
    GradMask mask(node->inputs.size());
    for (size_t i = 0; i < mask.size(); ++i)
      mask[i] = node->inputs[i].wants_grad();
    std::vector<Tensor> grads = node->backward(dy, mask);
    TGRAD_CHECK(grads.size() == mask.size(), "backward of '", node->name, "' returned ",
                grads.size(), " gradients for ", mask.size(), " inputs");
    if (g_anomaly_mode) check_finite(*node, grads);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (mask[i] && grads[i].defined()) deliver(node->inputs[i], grads[i]);
    }
    visited.push_back(std::move(node));
  }
  if (!retain_graph) {
    for (auto& node : visited) {
      node->backward = nullptr;  // frees the saved tensors
      node->released = true;
    }
  }
  return out;
}

Tensor root_gradient(const char* fn, const Tensor& root, const Tensor& gradient,
                     bool create_graph) {
  TGRAD_CHECK(root.defined(), fn, ": the output tensor is undefined");
  TGRAD_CHECK(root.requires_grad(), fn,
              ": the tensor does not require grad and has no grad_fn (did you set requires_grad "
              "on an input, outside NoGradGuard? A gradient returned by backward() or grad() can "
              "be differentiated again only when that call passed create_graph=true)");
  if (!gradient.defined()) {
    TGRAD_CHECK(root.numel() == 1, fn,
                ": a gradient can be implied only for a scalar output; this output has shape ",
                root.shape(), ", so pass a gradient of that shape");
    return ones_like(root);
  }
  TGRAD_CHECK(gradient.shape() == root.shape(), fn, ": gradient shape ", gradient.shape(),
              " does not match the output shape ", root.shape());
  TGRAD_CHECK(gradient.dtype() == root.dtype(), fn, ": gradient dtype ", gradient.dtype(),
              " does not match the output dtype ", root.dtype());
  TGRAD_CHECK(gradient.device() == root.device(), fn, ": gradient device ", gradient.device(),
              " does not match the output device ", root.device());
  return create_graph ? gradient : gradient.detach();
}

// A leaf's gradient must still fit the leaf: Module::to or set_data between forward and
// backward changes the leaf, not the gradient that the graph computes.
void check_leaf_gradient(const TensorImpl& leaf, const Tensor& g) {
  TGRAD_CHECK(g.shape() == leaf.shape && g.dtype() == leaf.dtype && g.device() == leaf.device,
              "backward: the gradient computed for a leaf is ", g.dtype(), " ", g.shape(), " on ",
              g.device(), ", but the leaf is now ", leaf.dtype, " ", leaf.shape, " on ",
              leaf.device,
              " (was it moved with Module::to() or set_data() between forward and backward?); "
              "no .grad was changed");
}

}  // namespace

void release_node(std::shared_ptr<Node>&& node) {
  if (!node) return;
  if (g_release_queue != nullptr) {  // an outer loop on this thread will destroy it
    g_release_queue->push_back(std::move(node));
    return;
  }
  std::vector<std::shared_ptr<Node>> queue;
  queue.push_back(std::move(node));
  g_release_queue = &queue;
  while (!queue.empty()) {
    std::shared_ptr<Node> next = std::move(queue.back());
    queue.pop_back();
    next.reset();  // may run ~Node, which only queues more work
  }
  g_release_queue = nullptr;
}

Node::~Node() {
  // The closure's captured tensors release their grad_fn through ~TensorImpl, which queues them.
  BackwardFn closure = std::move(backward);
  closure = nullptr;
  for (Edge& e : inputs)
    release_node(std::move(e.node));
}

TensorImpl::~TensorImpl() {
  release_node(std::move(grad_fn));
}

bool grad_mode_enabled() {
  return g_grad_mode;
}
void set_grad_mode(bool enabled) {
  g_grad_mode = enabled;
}
bool anomaly_mode_enabled() {
  return g_anomaly_mode;
}
void set_anomaly_mode(bool enabled) {
  g_anomaly_mode = enabled;
}

InferenceMode::InferenceMode(bool enabled)
    : previous_grad_(g_grad_mode), previous_inference_(g_inference_mode) {
  if (enabled) {
    g_grad_mode = false;
    g_inference_mode = true;
  }
}
InferenceMode::~InferenceMode() {
  g_grad_mode = previous_grad_;
  g_inference_mode = previous_inference_;
}
bool is_inference_mode_enabled() {
  return g_inference_mode;
}

RecordScope::RecordScope(const std::string& name) {
  g_scopes.push_back(name);
}
RecordScope::~RecordScope() {
  g_scopes.pop_back();
}

std::string current_record_scope() {
  std::string path;
  for (const std::string& s : g_scopes)
    path += (path.empty() ? "" : "/") + s;
  return path;
}

Tensor record(const char* name, Tensor y, const std::vector<Tensor>& inputs, Formula formula) {
  if (!g_grad_mode) return y;
  std::vector<Edge> edges(inputs.size());
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined() || !in.requires_grad()) continue;
    any = true;
    if (in.grad_fn()) {
      edges[i].node = in.grad_fn();
    } else {
      edges[i].leaf = in.impl_ptr();
    }
  }
  if (!any) return y;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->sequence_nr = g_next_sequence_nr++;
  node->inputs = std::move(edges);
  node->backward = std::move(formula.fn);
  node->saved.reserve(formula.saved.size());
  for (const Tensor& s : formula.saved) {
    if (!s.defined()) continue;
    node->saved.push_back({s.impl()->version, s.impl()->version->get(), s.shape()});
  }
  if (g_anomaly_mode) {
    std::ostringstream where;
    const std::string scope = current_record_scope();
    where << "in '" << (scope.empty() ? "<top level>" : scope) << "' with input shapes";
    for (const Tensor& in : inputs) {
      where << ' ' << (in.defined() ? detail::cat(in.shape()) : std::string("none"));
    }
    node->recorded_in = where.str();
  }
  y.impl()->requires_grad = true;
  y.impl()->grad_fn = std::move(node);
  return y;
}

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph,
                  bool create_graph) {
  const Tensor g = root_gradient("backward", root, gradient, create_graph);
  Traversal t = traverse({root}, {g}, retain_graph, create_graph, {});
  // Every node ran. Under the leaf lock, check every leaf and compute each new .grad
  // (accumulating can still run out of memory), and only then write them all with pointer swaps
  // that cannot fail, so that a throw anywhere changes no .grad.
  const std::lock_guard<std::mutex> lock(g_leaf_mutex);
  std::optional<EnableGradGuard> recording;
  std::optional<NoGradGuard> not_recording;
  if (create_graph) {
    recording.emplace();
  } else {
    not_recording.emplace();
  }
  std::vector<std::pair<TensorImpl*, std::shared_ptr<TensorImpl>>> updates;
  updates.reserve(t.leaves.size());
  for (auto& [raw, entry] : t.leaves) {
    TensorImpl& leaf = *entry.first;
    check_leaf_gradient(leaf, entry.second);
    Tensor sum = entry.second;
    if (leaf.grad) {
      sum = add(Tensor(leaf.grad), sum);
    } else if (sum.impl()->storage.use_count() > 1) {
      // The gradient shares storage with another tensor (the upstream gradient, another leaf's
      // gradient, a saved tensor): each .grad gets storage of its own, so that scaling one in
      // place (gradient clipping) cannot change another.
      sum = sum.clone();
    }
    if (!create_graph) sum = sum.detach();
    // A gradient made by a view-like op's copy is still a tensor of its own: the user may write
    // into .grad (gradient clipping).
    if (sum.impl()->copy_of_view != nullptr) sum = detail::unmark_copy_of_view(sum);
    updates.emplace_back(&leaf, sum.impl_ptr());
  }
  for (auto& [leaf, grad] : updates)
    leaf->grad = std::move(grad);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph) {
  TGRAD_CHECK(!outputs.empty(), "grad: no outputs given");
  TGRAD_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
              "grad: ", grad_outputs.size(), " grad_outputs for ", outputs.size(), " outputs");
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    root_grads.push_back(root_gradient(
        "grad", outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i], create_graph));
  }
  std::unordered_set<Node*> capture;
  for (const Tensor& in : inputs) {
    TGRAD_CHECK(in.defined() && in.requires_grad(), "grad: every input must require grad");
    if (in.grad_fn()) capture.insert(in.grad_fn().get());
  }
  Traversal t =
      traverse(outputs, root_grads, retain_graph.value_or(create_graph), create_graph, capture);
  std::vector<Tensor> result;
  for (const Tensor& in : inputs) {
    if (in.grad_fn()) {
      auto it = t.captured.find(in.grad_fn().get());
      result.push_back(it == t.captured.end() ? Tensor() : it->second);
    } else {
      auto it = t.leaves.find(in.impl());
      result.push_back(it == t.leaves.end() ? Tensor() : it->second.second);
    }
    if (result.back().defined() && result.back().impl()->copy_of_view != nullptr)
      result.back() = detail::unmark_copy_of_view(result.back());
  }
  return result;
}

namespace detail {
std::mutex& leaf_grad_mutex() {
  return g_leaf_mutex;
}
}  // namespace detail

}  // namespace tgrad
