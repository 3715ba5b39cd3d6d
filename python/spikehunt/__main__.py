"""python3 -m spikehunt --module FILE.py [--module ...] VERB [flags]: the command
line on the scenarios that FILE.py registers, for code that does not call
spikehunt.main() itself. A file that fails to import is bad input (exit 2)
naming the file and line. Sweeps start `python3 -m spikehunt --module FILE.py`
again for their workers."""
import os
import runpy
import sys
import traceback

import spikehunt


def _load(path):
    """Runs the file as a module (not as __main__); None, or an error line naming file:line."""
    try:
        runpy.run_path(path, run_name="spikehunt_module")
        return None
    except SyntaxError as e:
        return f"{os.path.relpath(e.filename or path)}:{e.lineno}: cannot import it: SyntaxError: {e.msg}"
    except BaseException as e:  # noqa: B902  (SystemExit and KeyboardInterrupt too: nothing was run yet)
        frames = [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) == path]
        where = f"{os.path.relpath(path)}:{frames[-1].lineno}" if frames else os.path.relpath(path)
        return f"{where}: cannot import it: {type(e).__name__}: {e}"


def run(argv):
    modules = []
    rest = list(argv)
    while rest and rest[0] in ("--module", "-m") or rest and rest[0].startswith("--module="):
        if rest[0].startswith("--module="):
            modules.append(rest.pop(0).split("=", 1)[1])
            continue
        rest.pop(0)
        if not rest:
            print("error: python3 -m spikehunt: --module needs a file", file=sys.stderr)
            return 2
        modules.append(rest.pop(0))
    # A training command of the user's, unmodified, and the doctor on it: this process only launches
    # it (no torch here: the API loads on first use, spikehunt/__init__.py).
    if "--" in rest and rest[:1] == ["run"]:
        from . import _command
        return _command.run(rest[1:])
    if "--" in rest and rest[:1] == ["doctor"]:
        from . import _command_doctor
        return _command_doctor.run(rest[1:])
    from . import _command, _command_scenario  # noqa: F401  (registers the scenario "command")
    # A command's own files are code too (the build id a sweep checks): its workers get them by inheritance.
    code_files = [f for f in os.environ.get("SPIKEHUNT_COMMAND_FILES", "").split(os.pathsep) if f]
    if rest[:1] == ["merge"] and not code_files:  # the shards of a command's sweep: their build's files
        try:
            code_files = _command.merge_files(rest)
        except _command._BadInput as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    code_files = code_files or _command.config_files(rest)  # ... and one run of a command's config
    if "--" in rest and rest[:1] == ["sweep"]:  # ... and a sweep over its knobs
        try:
            rest, code_files = _command.sweep_args(rest)
            os.environ["SPIKEHUNT_COMMAND_FILES"] = os.pathsep.join(code_files)
        except _command._BadInput as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    command = [sys.executable, "-m", "spikehunt"]
    for m in modules:
        path = os.path.abspath(m)
        if not os.path.isfile(path):
            print(f"error: {m}: --module names no file", file=sys.stderr)
            return 2
        problem = _load(path)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        command += ["--module", path]
    invoked = f"{sys.executable} -m spikehunt" + "".join(f" --module {m}" for m in modules)
    return spikehunt.main([invoked] + rest, exit=False, _command=command,
                          _build_files=[os.path.abspath(m) for m in modules] + code_files)


def console():
    """The `spikehunt` command that `pip install` puts on PATH: `python -m spikehunt`."""
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    console()
