// doctor/graph.cpp — probes of the autograd graph of a batch's loss: which
// tensors it reaches. A trainable tensor the loss depends on that is not a
// parameter of model() is trained by no optimizer built over the model (a
// layer kept in a Python list, a layer built inside forward()); a parameter
// the graph does not reach gets no gradient (a no_grad or detach around it).
#include <set>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include "base/number_format.h"
#include "harness/doctor/common.h"

namespace spikehunt::doctor_detail {

namespace {

// The leaves requiring grad that a tensor's graph reaches (their TensorImpl) and the tensors.
struct Leaves {
  std::set<const void*> impls;
  std::vector<torch::Tensor> tensors;
};

Leaves graph_leaves(const torch::Tensor& loss) {
  Leaves out;
  if (!loss.defined() || !loss.requires_grad()) return out;
  if (!loss.grad_fn()) {  // the loss is itself a leaf
    out.impls.insert(loss.unsafeGetTensorImpl());
    out.tensors.push_back(loss);
    return out;
  }
  std::vector<torch::autograd::Node*> stack{loss.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      if (out.impls.insert(acc->variable.unsafeGetTensorImpl()).second) out.tensors.push_back(acc->variable);
      continue;
    }
    for (const torch::autograd::Edge& e : node->next_edges()) {
      if (e.function) stack.push_back(e.function.get());
    }
  }
  return out;
}

// One training-mode pass: the leaves of the outputs' graph (what the forward depends on) and of the
// loss's, and whether the loss, differentiated, gives the outputs a gradient (as GraphProbe says).
struct Pass {
  Leaves outputs, loss;
  int loss_reaches_outputs = -1;
};

Pass pass_of_batch(Scenario& s, const Batch& b) {
  KeepRng keep;
  keep.reseed(4321);
  Pass p;
  const torch::Tensor out = guarded("forward", [&] { return s.forward(b.inputs, Tap()); });
  const torch::Tensor loss = guarded("loss", [&] { return s.loss(out, b.targets); });
  p.outputs = graph_leaves(out);
  p.loss = graph_leaves(loss);
  if (out.requires_grad()) {  // else the model has no trainable path: nothing to differentiate
    if (!loss.requires_grad()) {
      p.loss_reaches_outputs = 0;
    } else {
      const std::vector<torch::Tensor> g = torch::autograd::grad({loss.sum()}, {out}, {}, /*retain_graph=*/false,
                                                                 /*create_graph=*/false, /*allow_unused=*/true);
      p.loss_reaches_outputs = g.empty() || !g[0].defined() || g[0].abs().max().item<double>() == 0 ? 0 : 1;
    }
  }
  return p;
}

}  // namespace

GraphProbe probe_graph(Scenario& s, const Batch& b) {
  GraphProbe g;
  try {
    const Pass one = pass_of_batch(s, b);
    const Leaves& first = one.outputs;
    const Leaves& first_loss = one.loss;
    const Leaves second = pass_of_batch(s, b).outputs;
    g.loss_reaches_outputs = one.loss_reaches_outputs;
    std::set<const void*> params;
    for (const auto& p : s.model().named_parameters()) {
      params.insert(p.value().unsafeGetTensorImpl());
      if (p.value().requires_grad() && !first_loss.impls.count(p.value().unsafeGetTensorImpl())) {
        g.unreached.push_back(p.key());
      }
    }
    // Only what the forward depends on: a tensor the loss makes for itself is the loss's business.
    for (const torch::Tensor& t : first.tensors) {
      if (params.count(t.unsafeGetTensorImpl())) continue;
      g.foreign_shapes.push_back(c10::str(t.sizes()));
      g.foreign_numel += t.numel();
      g.foreign_rebuilt = g.foreign_rebuilt || !second.impls.count(t.unsafeGetTensorImpl());
    }
    g.measured = true;
  } catch (const std::exception&) {
    g.measured = false;  // the other probes report what the code throws
  }
  return g;
}

VitalSign unregistered_parameters(const GraphProbe& g) {
  VitalSign v = sign("unregistered_parameters");
  if (!g.measured) return skipped("unregistered_parameters", "the loss of a batch could not be differentiated");
  v.data = {{"foreign_tensors", g.foreign_shapes.size()}, {"foreign_elements", g.foreign_numel},
            {"rebuilt_each_pass", g.foreign_rebuilt}};
  v.evidence = "the outputs of a batch depend on " + std::to_string(g.foreign_shapes.size()) +
               " tensor(s) that require grad and are not parameters of model()";
  if (g.foreign_shapes.empty()) return v;
  v.named = g.foreign_shapes;
  fail(v, kRankInitSymmetry,
       "the outputs depend on " + std::to_string(g.foreign_shapes.size()) + " trainable tensor(s) that are not " +
           "parameters of model() (shapes " + list(g.foreign_shapes, 4) + ", " + std::to_string(g.foreign_numel) +
           " elements): no optimizer built over the model's parameters updates them, and no checkpoint holds them" +
           (g.foreign_rebuilt ? "; they are new tensors in each forward pass: layers built inside forward(), with "
                                "fresh random weights every call"
                              : "; the same tensors in each pass: modules kept outside the module tree (a Python "
                                "list or dict instead of nn.ModuleList / nn.ModuleDict)"),
       g.foreign_rebuilt ? "build every layer once in __init__ and assign it to an attribute of the module"
                         : "hold the layers in nn.ModuleList / nn.ModuleDict (or assign each to an attribute)");
  return v;
}

}  // namespace spikehunt::doctor_detail
