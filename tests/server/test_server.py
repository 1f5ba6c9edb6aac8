"""The warm server (dear/server/): a command through it behaves as one without it.

The machinery is tested with a stand-in `dear.cli` (a package folder that
holds the real `dear/server/`, `dear/compute/reproducible.py` and `dear/model/__init__.py`, and a `cli.py` of
the test's own): it echoes what it was given, waits for a signal, exits with
a chosen code, dies of a chosen signal. Its `dear` script is the real console
script's two lines. One server serves the module's tests; the real pipeline
through the server is what every end-to-end test runs (tests/conftest.py
leaves the server on), and `test_a_stage_writes_the_same_bytes_with_and_without_the_server`
compares the bytes.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

STAND_IN = '''
import os, signal, sys, time

def main():
    args = sys.argv[2:]  # past `train`: a stage's name, so that a server is started for it
    what = args[0] if args else "echo"
    if what == "echo":
        print("argv", args, "cwd", os.getcwd(), "var", os.environ.get("DEAR_TEST_VAR"), "pid", os.getpid())
        print("to stderr", file=sys.stderr)
        sys.exit(int(os.environ.get("DEAR_TEST_EXIT", "0")))
    if what == "stdin":
        print("read", sys.stdin.read().strip())
        return
    if what == "wait":  # until SIGINT (KeyboardInterrupt) or SIGTERM
        signal.signal(signal.SIGTERM, lambda *_: (print("got SIGTERM", flush=True), sys.exit(143)))
        open(args[1], "w").write(str(os.getpid()))
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            print("got SIGINT", flush=True)
            sys.exit(130)
        sys.exit(3)
    if what == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "process":
        print(oct(os.umask(0)), signal.getsignal(signal.SIGHUP) == signal.SIG_IGN,
              signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        return
    if what == "kernels":  # as a stage starts: the caps of compute.reproducible, then its first tensor
        from dear.compute import reproducible
        reproducible.apply(True)
        import torch
        print(torch.backends.cpu.get_cpu_capability(), torch.ones(3).sum().item())
        return
    if what == "imports":  # what a stage asks before recording torch's state (dear.compute.reproducible.in_force)
        from dear.compute.imports import loaded
        before = loaded("torch") is not None
        import torchvision
        print(before, loaded("torch") is not None, loaded("pandas") is not None)
        return
    if what == "modules":
        print(sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "open_clip", "dear",
                     "transformers") and sys.modules[name] is not None))
'''


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """(environment, dear script) of the stand-in package, its own socket folder; its servers stopped after."""
    base = tmp_path_factory.mktemp("server")
    package = base / "site" / "dear"
    shutil.copytree(ROOT / "dear" / "server", package / "server", ignore=shutil.ignore_patterns("__pycache__"))
    (package / "compute").mkdir()
    for name in ("__init__.py", "reproducible.py", "imports.py"):
        shutil.copy(ROOT / "dear" / "compute" / name, package / "compute" / name)
    (package / "model").mkdir()
    shutil.copy(ROOT / "dear" / "model" / "__init__.py", package / "model" / "__init__.py")
    (package / "__init__.py").write_text("")
    (package / "cli.py").write_text(STAND_IN)
    script = base / "bin" / "dear"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom dear.server.client import main\nsys.exit(main())\n")
    script.chmod(0o755)
    folder = base / "sockets"
    env = {**os.environ, "PYTHONPATH": str(package.parent), "DEAR_SERVER_DIR": str(folder), "DEAR_SERVER": "on"}
    yield env, script, folder
    _stop_servers(folder)


def _stop_servers(folder: Path) -> None:
    from dear.server.wire import control

    if folder.is_dir():
        control("stop", {"DEAR_SERVER_DIR": str(folder)})


def _run(stand_in, *args, env=None, **kwargs):
    base_env, script, _ = stand_in
    return subprocess.run([str(script), "train", *args], env={**base_env, **(env or {})}, capture_output=True, text=True,
                          timeout=120, cwd=kwargs.pop("cwd", None), **kwargs)


def test_a_command_gets_its_own_argv_folder_environment_streams_and_exit_code(stand_in, tmp_path):
    first = _run(stand_in, "echo", "x y", env={"DEAR_TEST_VAR": "one", "DEAR_TEST_EXIT": "7"}, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    second = _run(stand_in, "echo", "z", env={"DEAR_TEST_VAR": "two"}, cwd=elsewhere)
    plain = _run(stand_in, "echo", "x y", env={"DEAR_TEST_VAR": "one", "DEAR_TEST_EXIT": "7", "DEAR_SERVER": "off"},
                 cwd=tmp_path)
    assert first.returncode == 7 == plain.returncode
    assert first.stdout.split(" pid ")[0] == plain.stdout.split(" pid ")[0] == \
        f"argv ['echo', 'x y'] cwd {tmp_path} var one"
    assert first.stderr == plain.stderr == "to stderr\n"
    assert second.returncode == 0 and f"cwd {elsewhere} var two" in second.stdout
    assert len(list(stand_in[2].glob("*.sock"))) == 1  # one server served both (the plain run started none)


def test_the_command_reads_the_client_s_standard_input(stand_in):
    done = _run(stand_in, "stdin", input="hello\n")
    assert done.stdout == "read hello\n", done.stderr


def test_a_served_command_runs_the_kernels_a_plain_one_runs(stand_in, tmp_path):
    """ATen picks its kernels (AVX2, AVX-512) from ATEN_CPU_CAPABILITY the first time it is asked. A plain stage sets
    the variable before torch loads; a served one has torch loaded already and sets it later, so the server asks
    while it has the command's import environment (the caps included: wire.import_env). Without that, the CI's and
    this project's AVX-512 machines trained another backbone through the server (meaningful on such a CPU only)."""
    (tmp_path / "params.yaml").write_text("compute:\n  reproducible: true\n")
    served = _run(stand_in, "kernels", cwd=tmp_path)
    plain = _run(stand_in, "kernels", env={"DEAR_SERVER": "off"}, cwd=tmp_path)
    assert served.returncode == plain.returncode == 0, served.stderr + plain.stderr
    assert served.stdout == plain.stdout and served.stdout.startswith("AVX2 "), (served.stdout, plain.stdout)


def test_a_served_command_sees_torch_loaded_only_once_it_imported_it(stand_in):
    """`dear world` and `dear prepare` never import torch, so their provenance records no torch state; served, torch
    is loaded all along, and the command's own imports decide (dear/compute/imports.py)."""
    served, plain = _run(stand_in, "imports"), _run(stand_in, "imports", env={"DEAR_SERVER": "off"})
    assert (served.stdout, plain.stdout) == ("False True False\n",) * 2, (served.stderr, plain.stderr)


@pytest.mark.parametrize("library", ["torchvision", "open_clip", "timm"])
def test_what_a_loaded_library_brings_is_what_it_brings_in_a_process_of_its_own(library):
    from dear.compute.imports import _BRINGS

    code = f"import sys, {library}; print(sorted(n for n in {list(_BRINGS[library])!r} if n in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == str(sorted(_BRINGS[library]))


def test_a_served_command_has_the_libraries_loaded_but_dear_fresh_from_disk(stand_in):
    done = _run(stand_in, "modules")
    modules = eval(done.stdout)  # noqa: S307 (our own print of a list of names)
    assert "torch" in modules and "open_clip" in modules
    assert "dear.cli" in modules and "dear.server.daemon" not in modules and "dear.model" not in modules, modules
    assert "transformers" not in modules  # open_clip imported as dear imports it (dear.model.without_transformers)


def test_an_edit_of_dear_s_code_is_never_served_stale(stand_in):
    cli = Path(stand_in[0]["PYTHONPATH"]) / "dear" / "cli.py"
    original = cli.read_text()
    try:
        cli.write_text(original.replace('print("to stderr"', 'print("edited"'))
        assert _run(stand_in, "echo").stderr == "edited\n"
    finally:
        cli.write_text(original)
    assert _run(stand_in, "echo").stderr == "to stderr\n"


@pytest.mark.parametrize("signum, says, code", [(signal.SIGINT, "got SIGINT", 130), (signal.SIGTERM, "got SIGTERM", 143)])
def test_ctrl_c_and_sigterm_reach_the_command_and_its_exit_code_comes_back(stand_in, tmp_path, signum, says, code):
    base_env, script, _ = stand_in
    ready = tmp_path / "pid"
    client = subprocess.Popen([str(script), "train", "wait", str(ready)], env=base_env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text():
        assert time.monotonic() < deadline and client.poll() is None
        time.sleep(0.05)
    assert int(ready.read_text()) != client.pid  # the command runs in the server's child, not in the client
    client.send_signal(signum)
    out, _ = client.communicate(timeout=60)
    assert client.returncode == code and out.strip() == says


def test_the_command_has_its_client_s_umask_and_ignored_signals(stand_in):
    def nohup():
        os.umask(0o027)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    assert _run(stand_in, "process", preexec_fn=nohup).stdout.split() == ["0o27", "True", "True"]
    assert _run(stand_in, "process").stdout.split()[1:] == ["False", "True"]


def test_a_command_killed_by_a_signal_kills_its_client_with_the_same_signal(stand_in):
    assert _run(stand_in, "die").returncode == -signal.SIGKILL


def test_a_killed_client_takes_its_command_with_it(stand_in, tmp_path):
    base_env, script, _ = stand_in
    ready = tmp_path / "pid"
    client = subprocess.Popen([str(script), "train", "wait", str(ready)], env=base_env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    command = int(ready.read_text())
    client.kill()
    client.wait()
    deadline = time.monotonic() + 30
    while _alive(command):
        assert time.monotonic() < deadline, "the command outlived its killed client"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_stale_socket_or_a_killed_server_means_a_new_server_not_a_hung_job(stand_in, tmp_path):
    folder = tmp_path / "own"
    own = {"DEAR_SERVER_DIR": str(folder)}
    assert _run(stand_in, "echo", env=own).returncode == 0
    (sock,) = folder.glob("*.sock")
    server = int(next(line for line in sock.with_suffix(".log").read_text().splitlines()
                      if "ready" in line).split()[2].rstrip(":"))
    os.kill(server, signal.SIGKILL)  # its socket stays behind, and nobody answers there
    time.sleep(0.2)
    try:
        done = _run(stand_in, "echo", env=own)
        assert done.returncode == 0 and done.stderr == "to stderr\n"  # no word: a new server started quietly
    finally:
        _stop_servers(folder)


def test_a_folder_that_is_not_the_user_s_alone_is_one_line_and_the_plain_path(stand_in, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    done = _run(stand_in, "echo", env={"DEAR_SERVER_DIR": str(shared)})
    assert done.returncode == 0 and "argv ['echo']" in done.stdout
    warning, rest = done.stderr.split("\n", 1)
    assert warning.startswith("dear: no warm server: its folder") and "0700" in warning and rest == "to stderr\n"
    assert not list(shared.glob("*.sock"))


def test_a_command_that_runs_no_stage_runs_in_its_own_process(stand_in, tmp_path):
    """`dear --help`, check, recipe, plan, server: light without torch; a server's start would cost them seconds."""
    base_env, script, _ = stand_in
    folder = tmp_path / "light"
    env = {**base_env, "DEAR_SERVER_DIR": str(folder)}
    light = subprocess.run([str(script), "check", "modules"], env=env, capture_output=True, text=True, timeout=120)
    assert light.returncode == 0 and "torch" not in eval(light.stdout)  # noqa: S307 (our own print of names)
    assert not folder.exists()


def test_switched_off_no_server_is_started_and_nothing_is_said(stand_in, tmp_path):
    folder = tmp_path / "none"
    done = _run(stand_in, "echo", env={"DEAR_SERVER": "off", "DEAR_SERVER_DIR": str(folder)})
    assert done.returncode == 0 and done.stderr == "to stderr\n" and not folder.exists()


def test_the_socket_folder_and_socket_are_the_user_s_alone(stand_in):
    _run(stand_in, "echo")
    _, _, folder = stand_in
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for sock in folder.glob("*.sock"):
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600


def test_a_server_serves_only_its_import_time_setting():
    from dear.server import wire

    argv = ["dear", "train", "--params", "x.yaml"]
    env = wire.import_env(argv, {"HOME": "/h"})
    assert env["HF_HUB_OFFLINE"] == "1"  # as dear.cli sets it before a stage imports torch
    one = wire.key(env, sys.path)
    assert wire.key({**env, "OMP_NUM_THREADS": "2"}, sys.path) != one  # read by OpenMP when torch loads
    assert wire.key({**env, "DEAR_TEST_VAR": "2"}, sys.path) == one  # read by nobody at import
    assert wire.key(env, ["/elsewhere", *sys.path]) != one  # another import path imports other modules


def test_a_stage_whose_params_ask_for_reproducible_floats_gets_a_server_with_the_caps(tmp_path):
    from dear.compute import reproducible
    from dear.server import wire

    params = tmp_path / "p.yaml"
    params.write_text("compute:\n  reproducible: true\n")
    argv = ["dear", "--threads", "2", "train", "--params", str(params)]
    env = wire.import_env(argv, {})
    if "avx2" in reproducible.cpu_flags():
        assert {name: env[name] for name in reproducible.CAPS} == reproducible.CAPS
    assert "MKL_CBWR" not in wire.import_env(["dear", "check", "--params", str(params)], {})  # no stage: no caps
    assert "MKL_CBWR" not in wire.import_env(argv + ["--set", "compute.reproducible=false"], {})


def test_an_install_names_a_new_server_an_edit_of_a_checkout_does_not(tmp_path):
    """pip adds and removes files in site-packages (its folder's time moves); a checkout on the path changes as a
    researcher works, and its modules are imported fresh by each command anyway."""
    from dear.server import wire

    site, checkout = tmp_path / "lib" / "site-packages", tmp_path / "checkout"
    site.mkdir(parents=True)
    checkout.mkdir()
    path = [str(checkout), str(site)]
    before = wire.key({}, path)
    (checkout / "edited.py").write_text("x = 1\n")
    assert wire.key({}, path) == before
    time.sleep(0.01)
    (site / "newpkg-1.0.dist-info").mkdir()
    assert wire.key({}, path) != before


def test_a_socket_folder_with_a_long_path_still_serves(stand_in, tmp_path):
    """A Unix socket's address holds at most 107 bytes; the folder's path may be longer (pytest's, a deep home)."""
    folder = tmp_path / ("a-folder-with-a-long-name-" * 4) / "sockets"
    assert len(str(folder)) > 110
    try:
        done = _run(stand_in, "echo", env={"DEAR_SERVER_DIR": str(folder)})
        assert done.returncode == 0 and done.stderr == "to stderr\n" and len(list(folder.glob("*.sock"))) == 1
    finally:
        _stop_servers(folder)
