"""`spikehunt run [--steps N] [--out DIR] [--rules R] -- COMMAND ARGS...`: the user's training
command, unmodified, under the monitor (docs/commands.md).

The command runs with a sitecustomize (_site.py) first on its PYTHONPATH: its Python process,
once it imports torch, gets the monitor through torch's global hooks (_attach.py), which writes
the same folder as `run` (trace.jsonl, verdict.json, checkpoints) for each optimizer it steps,
and a status file this launcher reads back. The command's output passes through as it comes;
its stdin is closed (a script that reads it gets end-of-file, not a hang).
Exit codes as every verb's: 0 healthy, 1 a finding (extreme, non-finite, crashed), 2 bad input
(no command, a bad flag or rules file, a command that never imports torch or never steps an
optimizer), 130 interrupted.
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile

USAGE = "usage: spikehunt run [--steps N] [--out DIR] [--rules FILE] [--env NAME=VALUE] -- COMMAND [ARGS...]"


class _BadInput(Exception):
    pass


def _flags(argv):
    """(settings, command) from `run`'s flags before `--`."""
    flags, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    settings = {"steps": 0, "out": "results", "rules": {}}
    i = 0
    while i < len(flags):
        flag, value = flags[i], None
        if "=" in flag and flag.startswith("--"):
            flag, value = flag.split("=", 1)
        if flag not in ("--steps", "--out", "--rules", "--env"):
            raise _BadInput(f"run -- COMMAND: {flags[i]!r} is not a flag of run on a command (it takes --steps, "
                            f"--out, --rules, --env)\n{USAGE}")
        if value is None:
            if i + 1 == len(flags):
                raise _BadInput(f"run: {flag} needs a value\n{USAGE}")
            value, i = flags[i + 1], i + 1
        i += 1
        if flag == "--steps":
            try:
                settings["steps"] = int(value)
            except ValueError:
                settings["steps"] = -1
            if settings["steps"] < 1:
                raise _BadInput(f"run: --steps = {value!r}: a whole number of optimizer steps, 1 or more")
        elif flag == "--out":
            settings["out"] = value
        elif flag == "--env":
            settings.setdefault("env", []).append(_env_pair(value, "run"))
        else:
            settings["rules"] = _rules(value)
    if not command:
        raise _BadInput(f"run: nothing after `--`: give the training command to run\n{USAGE}")
    return settings, command


def _env_pair(value, verb):
    """`NAME=VALUE` of --env, checked."""
    name = value.split("=", 1)[0]
    if "=" not in value or not name or not (name[0].isalpha() or name[0] == "_") or not name.replace("_", "a").isalnum():
        raise _BadInput(f"{verb}: --env = {value!r}: NAME=VALUE, the variable the command reads (--env LR={{lr}})")
    return value


def _read_json(path, what):
    """A JSON input file; _BadInput naming the file (and the line) when it cannot be read or parsed."""
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise _BadInput(f"{path}: cannot read the {what}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise _BadInput(f"{path}:{e.lineno}: not JSON: {e.msg}") from None


def _rules(path):
    """A rules file's health fields (`calibrate` writes one)."""
    rules = _read_json(path, "rules file")
    health = rules.get("health") if isinstance(rules, dict) else None
    if not isinstance(health, dict):
        raise _BadInput(f"{path}: field health: a rules file holds an object \"health\" of rule fields "
                        f"(docs/health.md), this one {'has none' if isinstance(rules, dict) else 'is not an object'}")
    return health


def _environment(settings, work):
    """The command's environment: the sitecustomize and this package first on PYTHONPATH."""
    site = os.path.join(work, "site")
    os.makedirs(site)
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site.py"),
                os.path.join(site, "sitecustomize.py"))
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env.update(dict(pair.split("=", 1) for pair in settings.get("env", [])))
    if settings.get("deterministic"):  # what cuBLAS needs to be deterministic (torch's docs), unless set
        env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if settings.get("port"):  # a sweep's burst: a rendezvous port of its own (torchrun's, and env:// init's)
        env["MASTER_PORT"] = env["PET_MASTER_PORT"] = str(settings["port"])
    env["PYTHONPATH"] = os.pathsep.join([site, package] + [p for p in [env.get("PYTHONPATH")] if p])
    env["SPIKEHUNT_ATTACH"] = json.dumps({"out": os.path.abspath(settings["out"]), "steps": settings["steps"],
                                          "rules": settings["rules"], "status_dir": work,
                                          "threads": settings.get("threads"),
                                          "deterministic": settings.get("deterministic", False),
                                          "alternate": settings.get("alternate", False),
                                          "doctor": settings.get("doctor")})
    return env


def _statuses(work):
    found = []
    for name in sorted(os.listdir(work)):
        if name.startswith("status-") and name.endswith(".json"):
            with open(os.path.join(work, name)) as f:
                found.append(json.load(f))
    return found


def run(argv):
    """`run -- COMMAND`: returns the exit code."""
    try:
        settings, command = _flags(argv)
    except _BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shown = " ".join(command)
    os.makedirs(settings["out"], exist_ok=True)
    work = tempfile.mkdtemp(prefix=".spikehunt-command-", dir=settings["out"])
    try:
        return _run(settings, command, shown, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def free_port():
    """A TCP port free now on this machine: each burst's own rendezvous, so that two torchrun bursts
    of a sweep at once (-j 2) do not both listen on torchrun's default 29500."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def working_folder(work):
    """A working directory of one burst's own (work/cwd), where the command's relative paths still work:
    each entry of this process's working directory is linked into it, so what the command reads is
    there and what it writes beside them (a checkpoint it resumes from, its logs) stays apart from
    every other burst's, and leaves with the burst's scratch folder."""
    here, folder = os.getcwd(), os.path.join(work, "cwd")
    os.makedirs(folder)
    for name in os.listdir(here):
        os.symlink(os.path.join(here, name), os.path.join(folder, name))
    return folder


def execute(command, settings, work, echo=True, cwd=None):
    """Runs the command with the monitor attached (settings: out, steps, rules); its output passes
    through when `echo`. Returns (exit code, its last lines, the status of each process that
    imported torch). OSError when it cannot start; KeyboardInterrupt as it came."""
    tail = collections.deque(maxlen=12)
    child = subprocess.Popen(command, env=_environment(settings, work), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd)
    try:
        for line in iter(child.stdout.readline, b""):
            if echo:
                stream = sys.stdout if echo is True else echo
                stream.buffer.write(line)
                stream.flush()
            tail.append(line.decode(errors="replace").rstrip("\n"))
        code = child.wait()
    except BaseException:
        child.terminate()
        child.wait()
        raise
    return code, list(tail), _statuses(work)


class Stopped(Exception):
    """The command did not run to its end under a verb: `code` is the verb's exit code (said already)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def execute_under(verb, command, shown, settings, work, echo=True):
    """execute() for `verb -- COMMAND`: (exit code, its last lines as text, statuses); Stopped(2) when the
    program cannot start, Stopped(130) on Ctrl-C, each said on stderr."""
    try:
        code, tail, statuses = execute(command, settings, work, echo=echo)
    except OSError as e:
        print(f"error: {verb} -- {shown}: cannot start {command[0]!r}: {e.strerror}", file=sys.stderr)
        raise Stopped(2) from None
    except KeyboardInterrupt:
        print(f"\ninterrupted: {shown}", file=sys.stderr)
        raise Stopped(130) from None
    return code, "\n".join(f"  | {t}" for t in tail) or "  (no output)", statuses


def nothing_watched(statuses, code):
    """Why a command's processes gave no watched step: none imported torch, one ended abruptly, or none stepped."""
    if not statuses:
        return "no Python process of it imported torch"
    if any(s.get("abrupt") for s in statuses):
        return abrupt(statuses, code)
    return "it imported torch but never took an optimizer step"


def abrupt(statuses, code):
    """What to say of a process that imported torch and ended without its exit handlers."""
    pids = ", ".join(str(s["pid"]) for s in statuses if s.get("abrupt"))
    how = f"signal {-code}" if code < 0 else f"exit {code}"
    return (f"the Python process that imported torch (pid {pids}) ended without its exit handlers ({how}: a signal, "
            f"or a crash in native code), so its steps were not written")


def watched(statuses):
    """The status of the process that took the optimizer steps and wrote their folders (under
    torchrun, rank 0 of several that stepped); None when none stepped."""
    stepped = [s for s in statuses if s["steps"] or s["optimizers"]]
    return next((s for s in stepped if any(w["path"] for w in s["watches"])), stepped[0] if stepped else None)


def _run(settings, command, shown, work):
    try:
        code, last, statuses = execute_under("run", command, shown, settings, work)
    except Stopped as s:
        return s.code
    main = watched(statuses)
    if not statuses:
        print(f"error: run -- {shown}: no Python process of the command imported torch (exit {code}), so there is "
              f"nothing to watch: give the command that trains (python train.py ..., torchrun ... train.py); "
              f"its last lines:\n{last}", file=sys.stderr)
        return 2
    if main is None and any(s.get("abrupt") for s in statuses):
        print(f"crashed    run -- {shown}: {abrupt(statuses, code)}; its last lines:\n{last}", file=sys.stderr)
        return 1
    if main is None:
        print(f"error: run -- {shown}: the command imported torch but never took an optimizer step (exit {code}); "
              f"its last lines:\n{last}", file=sys.stderr)
        return 2
    print()
    if main.get("monitor_error"):
        print(f"warning: the monitor stopped watching at step {main['steps']}: {main['monitor_error']} "
              f"(a bug of spikehunt's: the script went on unwatched)", file=sys.stderr)
    for w in main["watches"]:
        print(f"{w['optimizer']}:")
        print(w["text"])
        if w["path"]:
            print(f"results    {w['path']}")
    for index, step in main["skipped"]:
        print(f"skipped    step {step} of optimizer {index}: the GradScaler found inf/NaN gradients and skipped it")
    if main["ended"] and main["ended"].startswith("--steps"):
        print(f"ended      {main['ended']}")
    if main["interrupted"]:
        return 130
    if main["error"]:
        print(f"crashed    the command raised: {main['error']['message']}\n{main['error']['traceback']}",
              file=sys.stderr)
        return 1
    if any(w["verdict"]["outcome"] != "healthy" for w in main["watches"]):
        return 1
    if code != 0:
        print(f"crashed    the command exited {code} after {main['steps']} step(s); its last lines:\n{last}",
              file=sys.stderr)
        return 1
    return 0


def _flag_value(flags, name):
    """(index, value) of `name VALUE` or `name=VALUE` in flags; (None, None) when absent."""
    for i, f in enumerate(flags):
        if f == name and i + 1 < len(flags):
            return i, flags[i + 1]
        if f.startswith(name + "="):
            return i, f.split("=", 1)[1]
    return None, None


def _without(flags, index):
    return flags[:index] + flags[index + (1 if "=" in flags[index] else 2):]


def sweep_args(argv):
    """`sweep [flags] --space S [--steps N] -- COMMAND`: the flags of a sweep over the scenario "command"
    (_command_scenario.py), its space S rewritten so that each dimension NAME is the knob {NAME} of the
    command (params.NAME; `seed` and dotted config paths stay fields), into OUT/command-space.json.
    Returns (the verb's arguments, the command's files to hash as code). _BadInput when they do not fit."""
    import difflib
    from ._command_scenario import KNOB
    verb, flags, command = argv[0], argv[1:argv.index("--")], argv[argv.index("--") + 1:]
    if not command:
        raise _BadInput(f"{verb}: nothing after `--`: give the training command, its knobs as {{NAME}} "
                        f"(python train.py --lr {{lr}})")
    at, space_path = _flag_value(flags, "--space")
    if space_path is None:
        raise _BadInput(f"{verb} -- COMMAND: --space names the space whose dimensions are the command's knobs")
    flags = _without(flags, at)
    steps = None
    at, value = _flag_value(flags, "--steps")
    if value is not None:
        flags = _without(flags, at)
        steps = int(value) if value.isdigit() and int(value) > 0 else None
        if steps is None:
            raise _BadInput(f"{verb}: --steps = {value!r}: a whole number of optimizer steps, 1 or more")
    env = []
    while True:
        at, value = _flag_value(flags, "--env")
        if value is None:
            break
        env.append(_env_pair(value, verb))
        flags = _without(flags, at)
    _, out = _flag_value(flags, "--out")
    out = out or "results/sweep"
    space = _read_json(space_path, "space")
    dims = space.get("dimensions") if isinstance(space, dict) else None
    if not isinstance(dims, dict) or not dims:
        raise _BadInput(f"{space_path}: field dimensions: a sweep over a command needs an object of dimensions, "
                        f"one a knob of the command")
    base = dict(space.get("base") or {})
    params = dict(base.get("params") or {})
    used = KNOB.findall(" ".join(command + env))
    fields = set(dims) | {"seed"} | set(params)
    for name in used:
        if name not in fields:
            near = difflib.get_close_matches(name, sorted(dims), n=1)
            raise _BadInput(f"{verb} -- COMMAND: {{{name}}} is not a dimension of {space_path}"
                            f"{f' (did you mean {{{near[0]}}}?)' if near else ''}; its dimensions: "
                            f"{', '.join(sorted(dims))}")
    for name in dims:
        if name not in used:
            raise _BadInput(f"{space_path}: dimension {name!r} reaches no {{{name}}} in the command, so its values "
                            f"would never reach the script: put {{{name}}} where the script reads it "
                            f"(--{name} {{{name}}}, {name}={{{name}}}, --env {name.upper()}={{{name}}}) or drop the "
                            f"dimension")
    params["command"] = command
    if env:
        params["env"] = env
    if steps:
        params["burst_steps"] = steps
    base.update({"scenario": "command", "params": params})
    converted = {"base": base,
                 "dimensions": {(n if "." in n or n == "seed" else f"params.{n}"): d for n, d in dims.items()}}
    for key, value in space.items():
        if key not in ("base", "dimensions"):
            converted[key] = value
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "command-space.json")
    with open(path + ".tmp", "w") as f:
        json.dump(converted, f, indent=2)
    os.replace(path + ".tmp", path)
    files = set(_script_files(command))
    if "--no-repeat-check" in flags:
        flags.remove("--no-repeat-check")
    else:
        for line in preflight(converted):
            print(f"warning: {line}", file=sys.stderr)
        files |= _imported  # the script and the local modules its preflight runs imported
    # `merge` of its shards reads them back (merge_files): the build it checks is the shards'.
    with open(os.path.join(out, "command-files.json.tmp"), "w") as f:
        json.dump(sorted(files), f)
    os.replace(os.path.join(out, "command-files.json.tmp"), os.path.join(out, "command-files.json"))
    return [verb, "--space", path, *flags], sorted(files)


def config_files(argv):
    """`run --config C` of a command's config (scenario "command"): its script files, hashed as code into the
    repro (`replay` warns when one changed). [] for any other run; a config that cannot be read is left to
    the engine, which names what is wrong with it."""
    _, path = _flag_value(argv[1:], "--config")
    if argv[:1] != ["run"] or path is None:
        return []
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return []
    params = config.get("params") if isinstance(config, dict) and config.get("scenario") == "command" else None
    command = params.get("command") if isinstance(params, dict) else None
    if not isinstance(command, list):
        return []
    return _script_files(command)


def _script_files(command):
    """The `.py` files a command names that exist, as absolute paths: the code it runs that spikehunt hashes."""
    return sorted({os.path.abspath(w) for w in command if isinstance(w, str) and w.endswith(".py") and os.path.isfile(w)})


def merge_files(argv):
    """`merge OUT SHARD_DIR...` of a command's sweep: the code files its shards hashed into their build
    id, from command-files.json in the folder above each shard (the sweep's --out); [] for others."""
    files = set()
    for word in argv[1:]:
        if word.startswith("-"):
            continue
        path = os.path.join(os.path.dirname(os.path.abspath(word.rstrip(os.sep))), "command-files.json")
        if os.path.isfile(path):
            files.update(_read_json(path, "list of the command's code files"))
    return sorted(files)


def _simplest(spec):
    """A dimension's simplest value (docs/sweeps.md): `simplest`, else a range's low end, a set's first."""
    if "simplest" in spec:
        return spec["simplest"]
    for kind in ("log_range", "range"):
        if kind in spec:
            return spec[kind][0]
    return spec["set"][0] if spec.get("set") else None


def _other(spec):
    """Another value of a dimension than its simplest: a range's other end, a set's next value."""
    simplest = _simplest(spec)
    for kind in ("log_range", "range"):
        if kind in spec:
            return spec[kind][1] if spec[kind][0] == simplest else spec[kind][0]
    values = spec.get("set") or []
    return next((v for v in values if v != simplest), None)


def _short_run(converted, changes, steps):
    """The first `steps` records of the space's base config with `changes` ({dimension: value}; the
    others at their simplest); None when the command does not train (each burst will say why)."""
    from ._command_scenario import knob_values, substitute
    from . import Config
    base = json.loads(json.dumps(converted["base"]))
    for path, spec in converted["dimensions"].items():
        node, keys = base, path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = changes.get(path, _simplest(spec))
    values = knob_values(Config(base))
    command = substitute(base["params"]["command"], values)
    env = substitute(list(base["params"].get("env") or []), values, "params.env")
    work = tempfile.mkdtemp(prefix="spikehunt-preflight-")
    try:
        settings = {"out": os.path.join(work, "out"), "steps": steps, "rules": {}, "env": env,
                    "threads": base.get("threads")}
        code, tail, statuses = execute(command, settings, work, echo=False, cwd=working_folder(work))
        _imported.update(m for s in statuses for m in s.get("modules") or [])
        main = watched(statuses)
        if main is None or not main["watches"][0]["path"]:
            return None, command
        with open(os.path.join(main["watches"][0]["path"], "trace.jsonl")) as f:
            return [json.loads(line) for line in f], command
    finally:
        shutil.rmtree(work, ignore_errors=True)


_imported = set()  # the local modules the preflight's runs imported (code of the sweep's build id)


def preflight(converted, steps=3):
    """What a sweep over a command says before it spends its budget (a list of lines): the space's
    simplest knobs run twice for `steps` steps — a script whose data differ between the two cannot
    replay; then once more for each dimension at another value — a knob whose value changes nothing
    in those steps (the same hashes and loss bits) may never reach the script."""
    first, command = _short_run(converted, {}, steps)
    if first is None:
        return []
    again, _ = _short_run(converted, {}, steps)
    for a, b in zip(first, again or []):
        for key, what in (("input_hash", "input"), ("label_hash", "label")):
            if a[key] != b[key]:
                return [f"two runs of the same knobs ({' '.join(command)}) saw other data at step {a['step']}: "
                        f"{what} hash {a[key]} then {b[key]}. The script's data differ from run to run (what does "
                        f"that: an unseeded shuffle or init, a time-based seed, data files that change), so its "
                        f"repros will not replay: seed it from a knob (--seed {{seed}}, a dimension of the space)"]
    said = []
    same = lambda r: [(x["input_hash"], x["label_hash"], x["loss"]) for x in r]  # noqa: E731
    for path, spec in converted["dimensions"].items():
        other = _other(spec)
        if other is None:
            continue
        moved, _ = _short_run(converted, {path: other}, steps)
        if moved is not None and same(moved) == same(first):
            name = path[len("params."):] if path.startswith("params.") else path
            said.append(f"knob {{{name}}}: {_simplest(spec)!r} and {other!r} gave the same first {steps} steps, bit "
                        f"for bit (input and label hashes, losses): its value may never reach the script (a flag "
                        f"the script does not read, or overridden), or act only later")
    return said
