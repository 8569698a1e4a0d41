"""llama.cpp's ``rpc-server``, built from the sources of the installed llama-cpp-python.

The RPC protocol changes between llama.cpp versions, so a server must come from the same sources
as the client. This builds it from llama-cpp-python's own sdist (fetched from PyPI once, the
vendored llama.cpp inside it) into a cache, for the tests and for trying RPC on one machine:

    python -m specchat.devtools.rpc_server build            # prints the binary's path
    python -m specchat.devtools.rpc_server start 50052 50053  # servers on 127.0.0.1
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

CACHE_ENV = "SPECCHAT_RPC_SERVER_CACHE"


def default_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "specchat-tests" / "rpc-server"))


def llama_cpp_version() -> str:
    return importlib.metadata.version("llama-cpp-python")


def binary_path(cache: Path | None = None) -> Path:
    return (cache or default_cache()) / llama_cpp_version() / "rpc-server"


def build(cache: Path | None = None, log: Path | None = None, jobs: int | None = None) -> Path:
    """The rpc-server binary for the installed llama-cpp-python, built once (a few minutes)."""
    out = binary_path(cache)
    if out.exists():
        return out
    version = llama_cpp_version()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rpc-server-") as tmp:
        work = Path(tmp)
        logf = log or out.parent / "build.log"
        with open(logf, "w") as lf:
            def run(*cmd: str) -> None:
                lf.write(f"$ {' '.join(cmd)}\n")
                lf.flush()
                subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, check=True)

            run(sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                "--dest", str(work), f"llama-cpp-python=={version}")
            sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
            with tarfile.open(sdist) as tf:
                tf.extractall(work, filter="data")
            src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
            build_dir = work / "build"
            run("cmake", "-S", str(src), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                "-DGGML_RPC=ON", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
                "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TOOLS=ON")
            run("cmake", "--build", str(build_dir), "--target", "ggml-rpc-server", "-j",
                str(jobs or os.cpu_count() or 2))
            built = next(build_dir.rglob("ggml-rpc-server"))
            shutil.copy2(built, out.with_suffix(".partial"))
            os.replace(out.with_suffix(".partial"), out)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(binary: Path, port: int, threads: int = 1, host: str = "127.0.0.1",
          timeout: float = 30.0) -> subprocess.Popen[bytes]:
    """Start a server and wait until it accepts connections."""
    proc = subprocess.Popen([str(binary), "-H", host, "-p", str(port), "-t", str(threads)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"rpc-server exited ({proc.returncode}): {err.strip()[-500:]}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"rpc-server did not listen on {host}:{port} within {timeout:.0f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specchat.devtools.rpc_server")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build rpc-server (cached) and print its path")
    b.add_argument("--cache", type=Path, default=None)
    s = sub.add_parser("start", help="run rpc-servers on 127.0.0.1 until interrupted")
    s.add_argument("ports", type=int, nargs="+")
    s.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    if a.cmd == "build":
        print(build(a.cache))
        return 0
    binary = build()
    procs = [start(binary, port, a.threads) for port in a.ports]
    print("rpc-servers on " + ",".join(f"127.0.0.1:{port}" for port in a.ports), flush=True)
    try:
        for pr in procs:
            pr.wait()
    except KeyboardInterrupt:
        pass
    finally:
        for pr in procs:
            pr.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
