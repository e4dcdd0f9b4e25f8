"""What ``tritonserver`` runs with: the binary, the python backend folder and the environment.

The nvidia-pytriton wheel carries the server, the python backend library and one python stub
per Python version, but no stub inside ``backends/python``. `prepare_backend_dir` assembles a
backend folder the project owns (``<triton home>/backends/python/``, gitignored: see
`services.processes.triton_home`) and `server_environment` gives the server the environment the
stub needs:

* ``LD_LIBRARY_PATH`` holds ``<site-packages>/nvidia_pytriton.libs`` and the running Python's
  ``LIBDIR`` (the stub links ``libpython3.X.so``; Python must be built with
  ``--enable-shared``). Without them the server hangs not-ready instead of exiting, so the
  launcher polls start-up with a hard timeout *and* a liveness check.
* the venv's ``bin`` comes first on ``PATH`` so the embedded interpreter finds the venv (and its
  numpy/torch); `check_stub_numpy` refuses a numpy the stub cannot use.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from services.atomic_files import atomic_path
from services.triton.server_errors import TritonServerError

TRITONSERVER_ENV = "MOVEPRED_TRITONSERVER"
_PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
_STUB_NAME = "triton_python_backend_stub"


def find_tritonserver() -> Path:
    """Path of the ``tritonserver`` binary.

    Order: ``$MOVEPRED_TRITONSERVER``, the binary inside the installed nvidia-pytriton wheel,
    ``tritonserver`` on ``PATH``. Raises FileNotFoundError when none exists.
    """
    override = os.environ.get(TRITONSERVER_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise FileNotFoundError(f"${TRITONSERVER_ENV}={override} is not a file")
        return path
    spec = importlib.util.find_spec("pytriton")  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "tritonserver" / "bin" / "tritonserver"
            if candidate.is_file():
                return candidate
    which = shutil.which("tritonserver")
    if which:
        return Path(which)
    raise FileNotFoundError(
        "tritonserver binary not found: install nvidia-pytriton (it ships the server) or set "
        f"${TRITONSERVER_ENV} to the binary"
    )


def _tritonserver_home(binary: Path) -> Path:
    """The folder holding ``bin/``, ``backends/`` and ``python_backend_stubs/``."""
    return binary.resolve().parent.parent


def _python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _copy_if_changed(src: Path, dst: Path) -> None:
    if dst.is_file():
        s, d = src.stat(), dst.stat()
        if s.st_size == d.st_size and s.st_mtime_ns == d.st_mtime_ns:
            return
    with atomic_path(dst) as tmp:  # atomic: a running server keeps its old inode
        shutil.copy2(src, tmp)  # keeps mode (the stub must stay executable) and mtime


def prepare_backend_dir(root: Path, tritonserver: Path | None = None) -> Path:
    """Assemble ``<root>/backends/python/`` and return ``<root>/backends``.

    Copies ``libtriton_python.so`` and ``triton_python_backend_utils.py`` from the server
    installation and the python stub built for the running interpreter (``X.Y``). Safe to call
    repeatedly and from concurrent processes; unchanged files are not copied again.
    """
    home = _tritonserver_home(tritonserver or find_tritonserver())
    src_backend = home / "backends" / "python"
    stub_root = home / "python_backend_stubs"
    stub = stub_root / _python_tag() / _STUB_NAME
    if not stub.is_file():
        available = sorted(p.name for p in stub_root.iterdir()) if stub_root.is_dir() else []
        raise TritonServerError(
            f"no python backend stub for Python {_python_tag()} under {stub_root} "
            f"(available: {available or 'none'})"
        )
    missing = [name for name in _PYTHON_BACKEND_FILES if not (src_backend / name).is_file()]
    if missing:
        raise TritonServerError(f"python backend files {missing} missing in {src_backend}")

    backends = Path(root) / "backends"
    target = backends / "python"
    target.mkdir(parents=True, exist_ok=True)
    for name in _PYTHON_BACKEND_FILES:
        _copy_if_changed(src_backend / name, target / name)
    _copy_if_changed(stub, target / _STUB_NAME)
    return backends


def _python_libdir() -> str:
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise TritonServerError(
            f"Python {sys.version.split()[0]} at {sys.executable} was built without "
            "--enable-shared (Py_ENABLE_SHARED=0): Triton's python backend stub needs "
            f"libpython{_python_tag()}.so. Use a shared-library build (pyenv: "
            "PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install ...)."
        )
    libdir = sysconfig.get_config_var("LIBDIR")
    if not libdir or not Path(libdir).is_dir():
        raise TritonServerError(f"Python LIBDIR {libdir!r} does not exist")
    return str(libdir)


@functools.cache
def stub_numpy_version(python: str = sys.executable) -> str | None:
    """The numpy version the python backend stub will import, or None if it has none.

    The stub embeds the interpreter of the environment first on PATH (this one, see
    `server_environment`) and does not read PYTHONPATH, so the question goes to this interpreter
    in isolated mode (-I), which sees what the stub sees. Asked once per interpreter: a server
    start (tests start many) should not pay a Python start-up and a numpy import each time."""
    probe = subprocess.run([python, "-I", "-c", "import numpy; print(numpy.__version__)"],
                           capture_output=True, text=True, timeout=120)
    return probe.stdout.strip() or None if probe.returncode == 0 else None


def check_stub_numpy(version: str | None) -> None:
    """Refuse numpy >= 2 for the stub: the pybind11 inside nvidia-pytriton 0.7.0's stub reads
    numpy 1 array descriptors, and with numpy 2 every output tensor it builds is empty (seen on
    an H100 with numpy 2.5.2: clients got 0 logits per board, no error)."""
    if version and int(version.split(".")[0]) >= 2:
        raise TritonServerError(
            f"the python backend stub would run with numpy {version} ({sys.executable}); its "
            "outputs are empty with numpy >= 2. Run Triton from an environment with numpy<2 "
            "(requirements.txt pins 1.26.4).")


def server_environment(tritonserver: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the server process (library path for the stub, venv first on PATH)."""
    env = dict(os.environ if base is None else base)
    libs = [_python_libdir()]
    site_packages = tritonserver.resolve().parents[3]
    pytriton_libs = site_packages / "nvidia_pytriton.libs"
    if pytriton_libs.is_dir():
        libs.insert(0, str(pytriton_libs))
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, *([old] if old else [])])
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", os.defpath)])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
