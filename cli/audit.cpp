// audit.cpp — `spikehunt audit`: NaN/+Inf/-Inf per tensor of a safetensors
// checkpoint, or whether two checkpoints hold the same state.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/error.h"
#include "base/number_format.h"
#include "base/program.h"
#include "cli/verbs.h"
#include "harness/safetensors.h"

namespace spikehunt {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int audit_verb(const std::string& file) {
  const SafeTensors f = read_safetensors(file);
  const std::vector<TensorAudit> audits = audit(f);
  std::printf("%-40s %-5s %-18s %10s %10s %10s %12s\n", "tensor", "dtype", "shape", "NaN", "+Inf", "-Inf",
              "max|finite|");
  int bad = 0;
  for (const TensorAudit& a : audits) {
    std::printf("%-40s %-5s %-18s %10lld %10lld %10lld %12s\n", a.name.c_str(), to_string(a.dtype),
                shape_text(a.shape).c_str(), static_cast<long long>(a.nan), static_cast<long long>(a.pos_inf),
                static_cast<long long>(a.neg_inf),
                a.nan + a.pos_inf + a.neg_inf == a.numel && a.numel > 0 ? "none" : fmt(a.max_abs).c_str());
    bad += !a.finite();
  }
  for (const auto& [k, v] : f.metadata) std::printf("metadata %s = %s\n", k.c_str(), v.c_str());
  std::printf("%s: %zu tensors, %d with non-finite values\n", file.c_str(), audits.size(), bad);
  return bad == 0 ? kExitOk : kExitFinding;
}

int pair_verb(const std::string& a_path, const std::string& b_path) {
  const SafeTensors a = read_safetensors(a_path);
  const SafeTensors b = read_safetensors(b_path);
  const PairDiff d = compare(a, b);
  if (d.same) {
    std::printf("same state: %zu tensors, bit-identical\n", a.tensors.size());
    return kExitOk;
  }
  std::printf("different state: first differing tensor %s: %s\n", d.first_tensor.c_str(), d.reason.c_str());
  if (d.reason == "values") {
    const TensorEntry* t = a.find(d.first_tensor);
    std::printf("  %lld of %lld elements differ; largest |a - b| = %s at flat index %lld\n",
                static_cast<long long>(d.differing), static_cast<long long>(t ? t->numel() : 0),
                fmt(d.max_abs_diff).c_str(), static_cast<long long>(d.max_diff_index));
  }
  return kExitFinding;
}

}  // namespace

void add_audit_verb(Cli& cli) {
  struct AuditArgs {
    std::string file;
    std::vector<std::string> pair;
  };
  auto audit_args = std::make_shared<AuditArgs>();
  CLI::App* audit_cmd = cli.verb(
      "audit", "Count NaN/+Inf/-Inf per tensor of a safetensors checkpoint, or compare two", [audit_args] {
        const AuditArgs& a = *audit_args;
        if (!a.pair.empty() && !a.file.empty()) {
          throw flag_error("audit", "--pair", "", "takes two files; give either FILE or --pair A B");
        }
        if (!a.pair.empty()) return pair_verb(a.pair[0], a.pair[1]);
        if (a.file.empty()) throw flag_error("audit", "FILE", "", "is missing", program_name() + " audit FILE.safetensors");
        return audit_verb(a.file);
      });
  audit_cmd->add_option("file", audit_args->file, "Checkpoint to audit");
  audit_cmd->add_option("--pair", audit_args->pair, "Two checkpoints: are they the same state?")->expected(2);
}

}  // namespace spikehunt
