// doctor/consistency.cpp — self-consistency before anything is said: every
// claim a cause or hint makes about something another sign measured is
// checked against that measurement, and a claim one contradicts is taken out
// (the report's "corrections" say what and why). A sign whose evidence meets
// its own failure condition must have failed; a consequence's lists of the
// causes that failed and that were ruled out must match those signs; the top
// cause must lie in the part the experiments found faulty. run_doctor repairs
// what it can and reports what remains (DoctorReport::contradictions), which
// the tests require to be empty for every report of every suite.
#include <algorithm>
#include <cmath>
#include <regex>

#include "base/number_format.h"
#include "harness/doctor/signs.h"

namespace spikehunt::doctor_detail {

namespace {

using json = nlohmann::json;

double num(const json& data, const char* key, double otherwise = NAN) {
  if (!data.is_object() || !data.contains(key)) return otherwise;
  const json& v = data.at(key);
  return v.is_number() ? v.get<double>() : otherwise;
}

// The layers gradient_flow measured a nonzero gradient for.
std::vector<std::string> layers_with_gradient(const DoctorReport& r) {
  std::vector<std::string> out;
  const VitalSign* flow = r.find("gradient_flow");
  if (flow == nullptr || flow->skipped || !flow->data.contains("layers")) return out;
  for (const auto& [layer, stats] : flow->data.at("layers").items()) {
    if (num(stats, "rms_grad", 0) > 0 || num(stats, "peak_grad_norm", 0) > 0) out.push_back(layer);
  }
  return out;
}

// Removes the sentence (between "; " / ": " separators or the ends) that holds `claim` from text.
bool drop_clause(std::string& text, const std::string& claim) {
  const size_t at = text.find(claim);
  if (at == std::string::npos) return false;
  size_t from = text.rfind("; ", at), to = text.find("; ", at + claim.size());
  from = from == std::string::npos ? 0 : from;
  to = to == std::string::npos ? text.size() : to;
  text.erase(from, to - from);
  if (text.rfind("; ", 0) == 0) text.erase(0, 2);
  return true;
}

}  // namespace

std::vector<std::string> check_consistency(DoctorReport& r, bool repair) {
  std::vector<std::string> found;
  auto note = [&](const std::string& what) { found.push_back(what); };

  // 1. "<layer> gets no gradient" against the gradient measured for that layer.
  const std::vector<std::string> flowing = layers_with_gradient(r);
  for (VitalSign& v : r.signs) {
    if (v.passed) continue;
    for (const std::string& layer : flowing) {
      for (const std::string& claim : {"(" + layer + ") gets no gradient", layer + " gets no gradient",
                                       "no gradient reaches " + layer}) {
        for (std::string* text : {&v.cause, &v.hint}) {
          if (text->find(claim) == std::string::npos) continue;
          // "no gradient reaches a, b" names several layers: only a layer that has one contradicts it.
          note(v.name + " says \"" + claim + "\" but gradient_flow measured a nonzero gradient for " + layer);
          if (repair) {
            drop_clause(*text, claim);
            r.corrections.push_back({{"sign", v.name}, {"removed", claim}, {"because", "gradient_flow measured a nonzero gradient for " + layer}});
          }
        }
      }
    }
  }

  // 2. Claims about the training labels' balance against label_balance's count.
  if (const VitalSign* balance = r.find("label_balance"); balance && !balance->skipped && balance->data.contains("top_class")) {
    const int64_t top = balance->data.at("top_class").get<int64_t>();
    const double share = num(balance->data, "top_share");
    static const std::regex kClaim("the training labels are ([0-9.]+)% class ([0-9]+)");
    for (VitalSign& v : r.signs) {
      for (std::string* text : {&v.cause, &v.evidence}) {
        std::smatch m;
        if (!std::regex_search(*text, m, kClaim)) continue;
        const double claimed = std::stod(m[1].str()) / 100;
        const int64_t cls = std::stoll(m[2].str());
        if (cls == top && std::fabs(claimed - share) < 0.01) continue;
        note(v.name + " says \"" + m[0].str() + "\" but label_balance counted class " + std::to_string(top) + " at " +
             percent(share));
        if (repair) {
          const std::string claim = m[0].str();
          drop_clause(*text, claim);
          r.corrections.push_back({{"sign", v.name}, {"removed", claim}, {"because", "label_balance's count differs"}});
        }
      }
    }
  }

  // 3. A consequence's lists of causes against those signs.
  for (const VitalSign& v : r.signs) {
    if (!v.data.is_object()) continue;
    for (const char* list_name : {"consequence_of", "causes_ruled_out"}) {
      if (!v.data.contains(list_name)) continue;
      const bool want_failed = std::string(list_name) == "consequence_of";
      for (const json& name : v.data.at(list_name)) {
        const VitalSign* c = r.find(name.get<std::string>());
        if (c == nullptr || c->skipped || c->passed == want_failed) {
          note(v.name + " lists " + name.get<std::string>() + " as " + (want_failed ? "failed" : "ruled out") +
               " but it " + (c == nullptr ? "is not in the report" : c->skipped ? "was skipped" : c->passed ? "passed" : "failed"));
        }
      }
    }
  }

  // 4. A sign whose evidence meets its own failure condition has failed.
  auto must_fail = [&](const char* name, bool condition, const std::string& what) {
    const VitalSign* v = r.find(name);
    if (v && !v->skipped && v->passed && condition) note(std::string(name) + " passed though " + what);
  };
  if (const VitalSign* v = r.find("lr_schedule"); v && !v->skipped && v->data.contains("peak")) {
    must_fail("lr_schedule", num(v->data, "peak", 1) == 0, "the learning rate it read is 0 at every step");
  }
  if (const VitalSign* v = r.find("batch_repeats"); v && !v->skipped && v->data.contains("distinct_batches")) {
    must_fail("batch_repeats", num(v->data, "distinct_batches", 2) == 1 && num(v->data, "batches", 0) >= 8 &&
                                   v->data.value("heldout_larger_than_batch", false),
              "every watched batch it hashed is the same one, and the held-out data is larger than that batch");
  }
  if (const VitalSign* v = r.find("applied_update"); v && !v->skipped && v->data.contains("steps_changed")) {
    must_fail("applied_update",
              num(v->data, "steps_changed", 1) == 0 && num(v->data, "steps_with_gradient", 0) > 0 &&
                  num(v->data, "lr_peak", 0) > 0,
              "no step changed a parameter while backward gave gradients at a learning rate above 0");
  }

  // 5. The top cause lies in the part the experiments found faulty.
  if (const VitalSign* e = r.find("faulty_part");
      e && !e->passed && e->data.contains("parts") && !e->data["parts"].empty() && !e->data.value("broad", false)) {
    const VitalSign* top = r.top();
    const std::vector<std::string> parts = e->data["parts"].get<std::vector<std::string>>();
    const bool scale = top && scale_sign(top->name) && std::find(parts.begin(), parts.end(), "optimizer") != parts.end();
    if (top && !scale && top->name != "faulty_part" && top->name != "training_code_error" &&
        std::find(parts.begin(), parts.end(), top->part) == parts.end()) {
      note("the top cause " + top->name + " (part " + top->part + ") is not in the part the experiments found faulty (" +
           list(parts) + ")");
    }
  }
  return found;
}

}  // namespace spikehunt::doctor_detail
