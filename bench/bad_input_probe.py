#!/usr/bin/env python3
"""bad_input_probe.py BINARY WORKDIR — 118 bad inputs a user could give (configs,
--set, rules, spaces, and the flags of sweep, lr-sensitivity, replay, guard,
merge, compare, report, doctor, calibrate, shrink and audit), none of them in
issue 29's list; each must exit 2 with "error:" naming what the case lists
(the flag or field, and the value), except a config behind a UTF-8 byte-order
mark, which is fine (exit 0). The first 58 were tried on 2026-12-03 before
stop 35, the other 60 after it. Prints how many were clear and each one that
was not. About 3 minutes on a 2-core VM."""
import subprocess, os, json, sys
B = os.path.abspath(sys.argv[1])
W = sys.argv[2]
os.makedirs(W + "/w", exist_ok=True)
os.chdir(W)
def w(name, text, mode="w"):
    p = W + "/w/" + name; open(p, mode).write(text); return p
open(W + "/w/afile", "w").write("x")
tiny = w("tiny.json", json.dumps({"model":{"kind":"mlp","mlp_width":8},"dataset":{"synthetic_train_per_class":10},"batch_size":8,"threads":1,"max_batches_per_epoch":2}))
cases = [
 # (args, substrings that a clear message must hold)
 (["run","--config",w("c1.json",'{"batch_size": -3}')], ["batch_size","-3"]),
 (["run","--config",w("c2.json",'{"optimizer": {"lr": "fast"}}')], ["optimizer.lr","fast"]),
 (["run","--config",w("c3.json",'{"optimizer": {"kind": "sgdd"}}')], ["optimizer.kind","sgdd"]),
 (["run","--config",w("c4.json",'[1,2,3]')], ["c4.json"]),
 (["run","--config",w("c5.json",'{"seed": 1.5}')], ["seed","1.5"]),
 (["run","--config",w("c6.json",'{"threads": 0}')], ["threads","0"]),
 (["run","--config",w("c7.json",'{"health": {"loss_limit": -1}}')], ["health.loss_limit","-1"]),
 (["run","--config",w("c8.json",'{"max_batches_per_epoch": 1e300}')], ["max_batches_per_epoch"]),
 (["run","--config",w("c9.json",'{"model": {"kind": "mlp", "mlp_width": 0}}')], ["mlp_width","0"]),
 (["run","--out",W + "/runs","--config",w("c10.json",'\ufeff' + open(tiny).read())], None),  # a BOM is fine: exit 0
 (["run","--config",w("c11.json",'{"seed": 1, "seed": 2}')], ["seed"]),
 (["run","--config",w("c12.json",'{"schedule": {"warmup_steps": -5}}')], ["schedule.warmup_steps","-5"]),
 (["run","--config",W + "/w"], [W + "/w"]),
 (["run","--config","/dev/null"], ["/dev/null"]),
 (["run","--set","optimizer.lr"], ["--set","optimizer.lr"]),
 (["run","--set","optimizer.lr=NaN"], ["optimizer.lr","NaN"]),
 (["run","--set","optimizer.lr=inf"], ["optimizer.lr","inf"]),
 (["run","--set","nosuch.field=1"], ["nosuch.field"]),
 (["run","--rules",w("r1.json",'{"health": {"activation_limit": "x"}}')], ["health.activation_limit"]),
 (["run","--rules",w("r2.json",'{"health": {"layers": {"fc1.weight": {"param_jump": 2}}}}')], ["param_jump"]),
 (["sweep","--space",w("s1.json",'{"dimensions": {"optimizer.lr": {"log_range": [0, 1]}}}'),"--out",W + "/o1"], ["optimizer.lr"]),
 (["sweep","--space",w("s2.json",'{"dimensions": {"seed": {"range": [0, 1e20]}}}'),"--out",W + "/o2"], ["seed"]),
 (["sweep","--space",w("s3.json",'{"dimensions": {}}'),"--out",W + "/o3"], ["dimensions"]),
 (["sweep","--space",w("s4.json",'{"dimensions": {"optimizer.lr": {"set": []}}}'),"--out",W + "/o4"], ["optimizer.lr"]),
 (["sweep","--runs","-1","--out",W + "/o5"], ["--runs","-1"]),
 (["sweep","--runs","1e3","--out",W + "/o6"], ["--runs","1e3"]),
 (["sweep","-j","0","--out",W + "/o7"], ["-j","0"]),
 (["sweep","--timeout","-5m","--out",W + "/o8"], ["--timeout","-5m"]),
 (["sweep","--shard","3","--out",W + "/o9"], ["--shard","3"]),
 (["sweep","--shard","1/0","--out",W + "/o10"], ["--shard","1/0"]),
 (["sweep","--max-shrinks","-2","--out",W + "/o11"], ["--max-shrinks","-2"]),
 (["sweep","--worker-rss-mb","0","--out",W + "/o12"], ["--worker-rss-mb","0"]),
 (["sweep","--junit",W + "/nodir/x.xml","--out",W + "/o13"], ["--junit"]),
 (["lr-sensitivity","--config",tiny,"--lrs","0.1,abc","--out",W + "/l1"], ["--lrs","abc"]),
 (["lr-sensitivity","--config",tiny,"--lrs","0,0.1","--out",W + "/l2"], ["--lrs","0"]),
 (["lr-sensitivity","--config",tiny,"--lrs","20","--out",W + "/l3"], ["--lrs","20"]),
 (["lr-sensitivity","--config",tiny,"--vary","model.kind","--out",W + "/l4"], ["--vary","model.kind"]),
 (["lr-sensitivity","--config",tiny,"--vary","model.kind=","--out",W + "/l5"], ["--vary"]),
 (["lr-sensitivity","--config",tiny,"--vary","nosuch=1,2","--out",W + "/l6"], ["nosuch"]),
 (["lr-sensitivity","--config",tiny,"--heldout","0","--out",W + "/l7"], ["--heldout","0"]),
 (["replay",w("x.repro.json",'{}')], ["x.repro.json"]),
 (["replay",W + "/none.repro.json"], ["none.repro.json"]),
 (["replay",w("y.repro.json",'{"format": "spikehunt-repro", "version": 99}')], ["y.repro.json"]),
 (["guard","check","--suite",w("g1.json",'{"configs": []}'),"--baseline",W + "/b.json"], ["g1.json"]),
 (["guard","check","--suite",w("g2.json",'{"configs": [{"name": "a", "config": "missing.json"}]}'),"--baseline",W + "/b.json"], ["missing.json"]),
 (["guard","record","--suite",w("g3.json",'{"configs": [{"name": "a"}, {"name": "a"}]}'),"--out",W + "/b2.json"], ["a"]),
 (["guard","check","--suite",w("g4.json",'{"configs": [{"name": "a", "config": "tiny.json"}], "tolerances": {"loss_relative": -1}}'),"--baseline",W + "/b.json"], ["loss_relative","-1"]),
 (["merge",W + "/m1"], ["SHARD_DIR"]),
 (["merge",W + "/m2",W + "/nosuchshard"], [W + "/nosuchshard"]),
 (["compare",W + "/nosuch1",W + "/nosuch2"], [W + "/nosuch1"]),
 (["report",W + "/nosuch3"], [W + "/nosuch3"]),
 (["doctor","--steps","-4"], ["--steps","-4"]),
 (["doctor","--planted","nope"], ["--planted","nope"]),
 (["calibrate","--seeds","0"], ["--seeds","0"]),
 (["calibrate","--margin","0.5"], ["--margin","0.5"]),
 (["shrink","--config",tiny,"--bursts","0"], ["--bursts","0"]),
 (["audit","--pair",W + "/a.safetensors"], ["--pair"]),
 (["audit",W + "/w/tiny.json"], ["tiny.json"]),
 # the second probe
 (["run","--config",w("d1.json",'{"seed": 1} x')], ["d1.json"]),
 (["run","--config",w("d2.json",'')], ["d2.json"]),
 (["run","--config",w("d3.json",'{"seed": -1}')], ["seed","-1"]),
 (["run","--config",w("d4.json",'{"seed": 18446744073709551616}')], ["seed"]),
 (["run","--config",w("d5.json",'{"batch_size": 100000000}')], ["batch_size"]),
 (["run","--config",w("d6.json",'{"name": 5}')], ["name","5"]),
 (["run","--config",w("d7.json",'{"protocol": {"task_order": [0, 0]}}')], ["task_order"]),
 (["run","--config",w("d8.json",'{"protocol": {"task_order": [7]}}')], ["task_order","7"]),
 (["run","--config",w("d9.json",'{"schedule": {"kind": "cosinee"}}')], ["schedule.kind","cosinee"]),
 (["run","--config",w("d10.json",'{"optimizer": {"betas": [0.9]}}')], ["betas"]),
 (["run","--config",w("d11.json",'{"dataset": {"kind": "idx", "path": "/nonexistent"}}')], ["/nonexistent"]),
 (["run","--config",w("d12.json",'{"scenario": "nosuch"}')], ["scenario","nosuch"]),
 (["run","--config",w("d13.json",'{"params": {"x": 1}}')], ["params","x"]),
 (["run","--config",w("d14.json",'\x00\x01\x02')], ["d14.json"]),
 (["run","--out",W + "/w/afile","--config",tiny], [W + "/w/afile"]),
 (["run","--set","seed=-1"], ["seed","-1"]),
 (["run","--set","batch_size=1.5"], ["batch_size","1.5"]),
 (["run","--set","model.kind=\"transformer\""], ["model.kind","transformer"]),
 (["run","--rules",w("r3.json",'[1]')], ["r3.json"]),
 (["run","--rules",w("r4.json",'{"optimizer": {"lr": 0.1}}')], ["r4.json","optimizer"]),
 (["sweep","--space",w("s5.json",'{"dimensions": {"optimizer.lr": {"range": [1, 0]}}}'),"--out",W + "/o1"], ["optimizer.lr"]),
 (["sweep","--space",w("s6.json",'{"dimensions": {"optimizer.lr": {"set": [0.1, "a"]}}}'),"--out",W + "/o2"], ["optimizer.lr"]),
 (["sweep","--space",w("s7.json",'{"base": {"batch_size": 0}, "dimensions": {"seed": {"range": [0, 3]}}}'),"--out",W + "/o3"], ["batch_size","0"]),
 (["sweep","--space",w("s8.json",'{"dimensions": {"model": {"range": [0, 3]}}}'),"--out",W + "/o4"], ["model"]),
 (["sweep","--space",w("s9.json",'{"dimensions": {"seed": {"range": [0, 3], "log": true}}}'),"--out",W + "/o5"], ["seed"]),
 (["sweep","--runs","0","--out",W + "/o6"], ["--runs","0"]),
 (["sweep","--seed","abc","--out",W + "/o7"], ["--seed","abc"]),
 (["sweep","--timeout","0","--out",W + "/o8"], ["--timeout","0"]),
 (["sweep","--timeout","5x","--out",W + "/o9"], ["--timeout","5x"]),
 (["sweep","--shard","3/2","--out",W + "/o11"], ["--shard","3/2"]),
 (["sweep","--shrink-bursts","-1","--out",W + "/o12"], ["--shrink-bursts","-1"]),
 (["sweep","--out",W + "/w/afile"], [W + "/w/afile"]),
 (["sweep","--space",W + "/w","--out",W + "/o13"], [W + "/w"]),
 (["lr-sensitivity","--config",tiny,"--lrs","nan","--out",W + "/l1"], ["--lrs","nan"]),
 (["lr-sensitivity","--config",tiny,"--vary","optimizer.momentum=2","--out",W + "/l2"], ["optimizer.momentum","2"]),
 (["lr-sensitivity","--config",tiny,"-j","0","--out",W + "/l3"], ["-j","0"]),
 (["lr-sensitivity","--config",tiny,"--timeout","abc","--out",W + "/l4"], ["--timeout","abc"]),
 (["replay",w("z.repro.json",'[]')], ["z.repro.json"]),
 (["replay",W + "/w"], [W + "/w"]),
 (["replay",w("n.repro.json",'{"format": "spikehunt-repro", "version": 1, "config": {"seed": "x"}}')], ["n.repro.json"]),
 (["guard","check","--suite",w("g5.json",'{"configs": [{"name": "a", "config": "tiny.json"}]}'),"--baseline",w("b5.json","not json")], ["b5.json"]),
 (["guard","check","--suite",w("g6.json",'{"configs": [{"name": "a", "config": "tiny.json"}]}'),"--baseline",w("b6.json",'{"format": "spikehunt-guard-baseline", "version": 1, "configs": {}}')], ["b6.json"]),
 (["guard","check","--suite",w("g7.json",'{"confgs": []}'),"--baseline",W + "/b.json"], ["confgs"]),
 (["guard","check","--suite",w("g8.json",'{"configs": [{"name": "", "config": "tiny.json"}]}'),"--baseline",W + "/b.json"], ["name"]),
 (["merge",W + "/m3",W + "/w"], [W + "/w"]),
 (["merge",W + "/m4",W + "/w/afile"], ["afile"]),
 (["report",W + "/w"], [W + "/w"]),
 (["compare",W + "/w",W + "/w"], [W + "/w"]),
 (["doctor","--steps","abc"], ["--steps","abc"]),
 (["doctor","--config",w("d15.json",'{"batch_size": 0}')], ["batch_size"]),
 (["calibrate","--lrs",""], ["--lrs"]),
 (["calibrate","--margin","abc"], ["--margin","abc"]),
 (["calibrate","--config",tiny,"--out",W + "/w/afile/x.json"], ["afile"]),
 (["shrink","--config",tiny,"--bursts","-3"], ["--bursts","-3"]),
 (["shrink","--config",W + "/nonexist.json"], ["nonexist.json"]),
 (["audit",w("e.safetensors","\x00"*4)], ["e.safetensors"]),
 (["audit",w("f.safetensors",b"\xff\xff\xff\xff\xff\xff\xff\x7f{}", "wb")], ["f.safetensors"]),
 (["audit",w("g.safetensors",b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}".ljust(24, b" ")[:24], "wb")], ["g.safetensors"]),
 (["nosuchverb"], ["nosuchverb"]),
 (["run","--nosuchflag"], ["--nosuchflag"]),
]
clear = 0
unclear = []
for args, parts in cases:
    r = subprocess.run([B]+args, capture_output=True, text=True, timeout=600, errors="replace")
    text = r.stdout + r.stderr
    if parts is None:
        ok = r.returncode == 0
    else:
        ok = r.returncode == 2 and all(p in text for p in parts) and "error:" in text and "[json.exception" not in text
    clear += ok
    if not ok:
        unclear.append((" ".join(args)[:150], r.returncode, text.strip()[-300:]))
print(f"{clear} of {len(cases)} clear")
for u in unclear:
    print("UNCLEAR:", u[0], "| exit", u[1], "|", u[2].replace("\n", " / "))
