// config_describe.cpp — a config's parts in words, for headers and reports
// ("sgd lr=0.05 momentum=0.9", the model, the schedule, the protocol).
#include "base/number_format.h"
#include "scenarios/config.h"
#include "scenarios/config_fields.h"

namespace spikehunt {

using namespace config_detail;

std::string describe_optimizer(const OptimizerConfig& o) {
  std::string s = std::string(to_string(o.kind)) + " lr=" + significant(o.lr, 6);
  if (o.kind == OptimizerKind::kSgd) {
    s += " momentum=" + significant(o.momentum, 6);
    if (o.nesterov) s += " nesterov";
  } else {
    s += " betas=(" + significant(o.betas[0], 6) + "," + significant(o.betas[1], 6) + ") eps=" + significant(o.eps, 6);
  }
  if (o.weight_decay > 0) s += " weight_decay=" + significant(o.weight_decay, 6) + (o.independent_weight_decay ? " (independent)" : "");
  return s;
}

std::string describe_model_details(const TrainingConfig& c) {
  return c.model.kind == "gpt" ? describe_gpt(c.model.gpt) : describe_activation(c.activation);
}

std::string describe_gpt(const GptConfig& m) {
  std::string s = "width " + std::to_string(m.width) + ", " + std::to_string(m.layers) + " layers, " +
                  std::to_string(m.heads) + " heads, context " + std::to_string(m.context);
  if (m.qk_layernorm) s += ", qk-layernorm";
  if (m.z_loss > 0) s += ", z-loss " + significant(m.z_loss, 6);
  if (m.tied_embeddings) s += ", tied embeddings";
  return s;
}

std::string describe_activation(const ActivationConfig& a) {
  if (a.kind == ActivationKind::kLeakyRelu) return "leaky_relu(" + significant(a.slope, 6) + ")";
  return to_string(a.kind);
}

std::string describe_schedule(const ScheduleConfig& s) {
  if (s.kind == ScheduleKind::kConstant && s.warmup_steps == 0) return "";
  std::string out;
  if (s.warmup_steps > 0) out = "warm-up " + std::to_string(s.warmup_steps) + " steps";
  if (s.kind != ScheduleKind::kConstant) {
    out += (out.empty() ? "" : ", then ") + std::string(to_string(s.kind));
    if (s.kind == ScheduleKind::kStep) out += " x" + significant(s.gamma, 6) + " every " + std::to_string(s.step_size);
    else out += " to " + significant(s.min_lr, 6) + (s.decay_steps > 0 ? " at step " + std::to_string(s.decay_steps) : "");
  }
  return out;
}

std::string describe_params(const Params& p) {
  std::string out;
  for (auto it = p.values().begin(); it != p.values().end(); ++it) {
    out += (out.empty() ? "" : " ") + it.key() + "=" + it->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return out;
}

std::string describe_protocol(const ProtocolConfig& p) {
  std::string s;
  for (int64_t d : p.task_order) {
    if (d < 0 || d >= int64_t(p.domains.size())) continue;
    s += (s.empty() ? "" : " -> ") + std::string(1, char('A' + d)) + "=" + list_text(p.domains[d]);
  }
  if (p.relaxation_epochs > 0) s += " -> relax(all)";
  s += ", " + std::to_string(p.epochs_per_phase) + " epoch(s) per domain";
  if (p.relaxation_epochs > 0) s += ", " + std::to_string(p.relaxation_epochs) + " relaxation";
  return s;
}

}  // namespace spikehunt