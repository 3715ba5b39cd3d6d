// doctor/report.cpp — a DoctorReport as text (the most likely cause first,
// then every sign) and as JSON.
#include <cstdio>

#include "harness/doctor/signs.h"

namespace spikehunt {

using json = nlohmann::json;

std::string doctor_text(const DoctorReport& report, bool verbose) {
  std::string out;
  if (const VitalSign* top = report.top()) {
    out += "most likely cause: " + top->cause + "  [" + top->name + "]\n";
  } else {
    out += "no vital sign failed: nothing points at a classic training bug\n";
  }
  int failed = 0, skipped_n = 0;
  for (const VitalSign& s : report.signs) {
    char head[64];
    std::snprintf(head, sizeof head, "  %-4s  %-20s ", s.skipped ? "skip" : s.passed ? "pass" : "FAIL", s.name.c_str());
    out += head + s.evidence + "\n";
    if (!s.passed) {
      ++failed;
      out += "        hint: " + s.hint + "\n";
      if (verbose && s.data.contains("full")) out += "        full text:\n" + s.data["full"].get<std::string>() + "\n";
    }
    skipped_n += s.skipped;
  }
  if (verbose) {
    auto secs = [](double x) {
      char b[32];
      std::snprintf(b, sizeof b, "%.2f s", x);
      return std::string(b);
    };
    std::string times = "the watched run " + secs(report.run_seconds);
    for (const VitalSign& s : report.signs) {
      if (s.seconds >= 0.005) times += ", " + s.name + " " + secs(s.seconds);
    }
    out += "  time: " + times + " (signs under 5 ms not listed)\n";
  }
  out += std::to_string(report.signs.size()) + " vital signs: " +
         std::to_string(report.signs.size() - size_t(failed) - size_t(skipped_n)) + " passed, " +
         std::to_string(failed) + " failed, " + std::to_string(skipped_n) + " skipped\n";
  return out;
}

json doctor_json(const DoctorReport& report) {
  json signs = json::array();
  for (const VitalSign& s : report.signs) {
    json j = {{"name", s.name}, {"passed", s.passed}, {"skipped", s.skipped}, {"evidence", s.evidence},
              {"hint", s.hint}, {"named", s.named},   {"data", s.data}, {"seconds", s.seconds}, {"part", s.part}};
    if (!s.passed) j["cause"] = s.cause, j["rank"] = s.rank;
    signs.push_back(j);
  }
  json top = nullptr;
  if (const VitalSign* t = report.top()) top = {{"sign", t->name}, {"cause", t->cause}, {"hint", t->hint}, {"part", t->part}};
  return {{"passed", report.passed()}, {"most_likely_cause", top}, {"signs", signs},
          {"scenario", report.scenario}, {"parameters", report.parameters}, {"optimizers", report.optimizers},
          {"run_seconds", report.run_seconds}, {"corrections", report.corrections},
          {"contradictions", report.contradictions}};
}

}  // namespace spikehunt
