#!/usr/bin/env bash
# Side by side on this machine, same thread count, same LibTorch build:
# PyTorch's Python API (plain, a hook-based monitor, detect_anomaly) and
# spikehunt (plain, monitored, monitored with fail-fast checks), one
# simple_cnn training step at batch 64; then the gpt step of configs/gpt.json
# (batch 16 x 64 tokens), PyTorch plain against spikehunt plain and monitored.
# Prints one table of median ms per step and ratios to PyTorch plain.
# Usage: bench/peer/run.sh [THREADS]      (default 2; builds if needed)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
threads=${1:-2}
"$root/scripts/setup.sh" > /dev/null
python=${SPIKEHUNT_VENV:-$root/.venv}/bin/python
bench="$root/build/bench/spikehunt_bench"
[ -x "$bench" ] || "$root/scripts/build.sh" > /dev/null
# Rounds alternate the two processes, so drift on a shared machine hits both;
# each row is the median over the rounds.
rounds=${ROUNDS:-3}
pys=() ccs=() gpys=() gccs=()
for ((r = 0; r < rounds; ++r)); do
  pys+=("$("$python" "$root/bench/peer/peer.py" --threads "$threads" --repeats 5 2> /dev/null)")
  ccs+=("$(SPIKEHUNT_BENCH_THREADS=$threads "$bench" --benchmark_filter='BM_CnnStep' --benchmark_repetitions=5 \
           --benchmark_min_time=1 --benchmark_enable_random_interleaving=true 2> /dev/null)")
  gpys+=("$("$python" "$root/bench/peer/peer.py" --threads "$threads" --model gpt --repeats 5 2> /dev/null)")
  gccs+=("$(SPIKEHUNT_BENCH_THREADS=$threads "$bench" --benchmark_filter='BM_GptStep' --benchmark_repetitions=5 \
           --benchmark_min_time=1 --benchmark_enable_random_interleaving=true 2> /dev/null)")
done
gpy=$(printf '%s\n' "${gpys[@]}")
gcc=$(printf '%s\n@@\n' "${gccs[@]}")
py=$(printf '%s\n' "${pys[@]}")
cc=$(printf '%s\n@@\n' "${ccs[@]}")
"$python" - "$py" "$cc" "$threads" "$gpy" "$gcc" <<'PY'
import json, re, sys, datetime, platform
import statistics
pys = [json.loads(line) for line in sys.argv[1].splitlines() if line.strip()]
ccs = [c for c in sys.argv[2].split("@@") if c.strip()]
threads = sys.argv[3]
def grab(text, label):
    m = re.search(label + r" ([\d.]+) ms", text)
    return float(m.group(1)) if m else float("nan")
med = statistics.median
py = dict(pys[0])
for k in ("plain_ms", "monitored_ms", "anomaly_ms"):
    py[k] = med(p[k] for p in pys)
plain = med(grab(c, "plain") for c in ccs)
watched = med(grab(c, "monitored") for c in ccs)
fast = med(grab(c, "fail-fast") for c in ccs)
cc = ccs[0].strip()
rows = [("PyTorch (Python)", "plain", py["plain_ms"]),
        ("PyTorch (Python)", "hook-based monitor", py["monitored_ms"]),
        ("PyTorch (Python)", "detect_anomaly", py["anomaly_ms"]),
        ("spikehunt (C++)", "plain", plain),
        ("spikehunt (C++)", "monitored", watched),
        ("spikehunt (C++)", "monitored, fail-fast", fast)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(f"simple_cnn training step, batch 64, {threads} thread(s); {datetime.date.today()}; {cpu}; "
      f"median of {len(pys)} alternating rounds")
print(f"PyTorch {py['torch']} (BLAS loaded: {py['blas']})")
print(cc.splitlines()[0])
print(f"{'':18} {'mode':27} {'ms/step':>8} {'x PyTorch plain':>16}")
for who, mode, t in rows:
    print(f"{who:18} {mode:27} {t:8.2f} {t / py['plain_ms']:16.2f}")
ratios = [grab(c, "monitored") / grab(c, "plain") for c in ccs]
def interleaved(text, name, model="simple_cnn"):
    m = re.search(model + " step, interleaved step by step: " + name + r" = ([\d.]+)", text)
    return float(m.group(1)) if m else float("nan")
inter = med(interleaved(c, "monitored/plain") for c in ccs)
inter_fast = med(interleaved(c, "fail-fast/plain") for c in ccs)
print(f"spikehunt monitored / spikehunt plain = {watched / plain:.3f} (per round: {', '.join(f'{r:.3f}' for r in ratios)}); "
      f"fail-fast / plain = {fast / plain:.3f}; "
      f"PyTorch anomaly / PyTorch plain = {py['anomaly_ms'] / py['plain_ms']:.2f}")
print(f"spikehunt, the three modes interleaved step by step (BM_CnnStepInterleaved): monitored / plain = {inter:.3f}, "
      f"fail-fast / plain = {inter_fast:.3f}")
gpys = [json.loads(line) for line in sys.argv[4].splitlines() if line.strip()]
gccs = [c for c in sys.argv[5].split("@@") if c.strip()]
gpy = med(p["plain_ms"] for p in gpys)
gplain = med(grab(c, "plain") for c in gccs)
gwatched = med(grab(c, "monitored") for c in gccs)
ginter = med(interleaved(c, "monitored/plain", "gpt") for c in gccs)
print()
print(f"gpt training step (configs/gpt.json: {gpys[0]['parameters']:,} parameters, batch 16 x 64 tokens, AdamW, clip 1.0), "
      f"{threads} thread(s)")
print(f"{'':18} {'mode':27} {'ms/step':>8} {'x PyTorch plain':>16}")
for who, mode, t in [("PyTorch (Python)", "plain", gpy), ("spikehunt (C++)", "plain", gplain),
                     ("spikehunt (C++)", "monitored", gwatched)]:
    print(f"{who:18} {mode:27} {t:8.2f} {t / gpy:16.2f}")
print(f"spikehunt gpt, the three modes interleaved step by step (BM_GptStepInterleaved): monitored / plain = {ginter:.3f}")
PY
