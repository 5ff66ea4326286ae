// The tape engine: recording nodes, and running them in decreasing sequence number so that a
// node runs only after every consumer of its output has delivered its gradient.
#include "core/autograd.h"

#include <atomic>
#include <cmath>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/ops.h"

namespace tgrad {

namespace {

thread_local bool g_grad_mode = true;
thread_local bool g_anomaly_mode = false;
thread_local std::vector<std::string> g_scopes;
std::atomic<uint64_t> g_next_sequence_nr{0};

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

Traversal traverse(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads,
                   bool retain_graph, const std::unordered_set<Node*>& capture) {
  NoGradGuard no_grad;  // backward formulas are not themselves recorded
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
    TGRAD_CHECK(
        !node->released,
        "backward: trying to backward through the graph a second time "
        "(op '",
        node->name, "', recorded as #", node->sequence_nr,
        "); its saved tensors "
        "were freed by the first backward. Pass retain_graph=true to that call to keep them");
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

Tensor root_gradient(const char* fn, const Tensor& root, const Tensor& gradient) {
  TGRAD_CHECK(root.defined(), fn, ": the output tensor is undefined");
  TGRAD_CHECK(root.requires_grad(), fn,
              ": the tensor does not require grad and has no grad_fn "
              "(did you set requires_grad on an input, outside NoGradGuard?)");
  if (!gradient.defined()) {
    TGRAD_CHECK(root.numel() == 1, fn,
                ": a gradient can be implied only for a scalar output; "
                "this output has shape ",
                root.shape(), ", so pass a gradient of that shape");
    return ones_like(root);
  }
  TGRAD_CHECK(gradient.shape() == root.shape(), fn, ": gradient shape ", gradient.shape(),
              " does not match the output shape ", root.shape());
  TGRAD_CHECK(gradient.dtype() == root.dtype(), fn, ": gradient dtype ", gradient.dtype(),
              " does not match the output dtype ", root.dtype());
  TGRAD_CHECK(gradient.device() == root.device(), fn, ": gradient device ", gradient.device(),
              " does not match the output device ", root.device());
  return gradient.detach();
}

}  // namespace

bool grad_mode_enabled() {
  return g_grad_mode;
}
bool anomaly_mode_enabled() {
  return g_anomaly_mode;
}
void set_anomaly_mode(bool enabled) {
  g_anomaly_mode = enabled;
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
void set_grad_mode(bool enabled) {
  g_grad_mode = enabled;
}

Tensor record(const char* name, Tensor y, const std::vector<Tensor>& inputs, BackwardFn backward) {
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
  node->backward = std::move(backward);
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

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  const Tensor g = root_gradient("backward", root, gradient);
  Traversal t = traverse({root}, {g}, retain_graph, {});
  // Every node ran: now compute each leaf's new .grad (accumulating can still run out of
  // memory), and only then write them all with pointer swaps that cannot fail, so that a throw
  // anywhere changes no .grad.
  NoGradGuard no_grad;
  std::vector<std::pair<TensorImpl*, std::shared_ptr<TensorImpl>>> updates;
  updates.reserve(t.leaves.size());
  for (auto& [raw, entry] : t.leaves) {
    TensorImpl& leaf = *entry.first;
    Tensor sum = entry.second;
    if (leaf.grad) {
      sum = add(Tensor(leaf.grad), sum);
    } else if (sum.impl()->storage == root.impl()->storage ||
               sum.impl()->storage == g.impl()->storage) {
      sum = sum.clone();  // never alias the user's gradient or output
    }
    updates.emplace_back(&leaf, sum.detach().impl_ptr());
  }
  for (auto& [leaf, grad] : updates)
    leaf->grad = std::move(grad);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  TGRAD_CHECK(!outputs.empty(), "grad: no outputs given");
  TGRAD_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
              "grad: ", grad_outputs.size(), " grad_outputs for ", outputs.size(), " outputs");
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    root_grads.push_back(
        root_gradient("grad", outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i]));
  }
  std::unordered_set<Node*> capture;
  for (const Tensor& in : inputs) {
    TGRAD_CHECK(in.defined() && in.requires_grad(), "grad: every input must require grad");
    if (in.grad_fn()) capture.insert(in.grad_fn().get());
  }
  Traversal t = traverse(outputs, root_grads, retain_graph, capture);
  std::vector<Tensor> result;
  for (const Tensor& in : inputs) {
    if (in.grad_fn()) {
      auto it = t.captured.find(in.grad_fn().get());
      result.push_back(it == t.captured.end() ? Tensor() : it->second);
    } else {
      auto it = t.leaves.find(in.impl());
      result.push_back(it == t.leaves.end() ? Tensor() : it->second.second);
    }
  }
  return result;
}

}  // namespace tgrad
