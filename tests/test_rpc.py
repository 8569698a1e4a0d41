"""The target over llama.cpp's RPC backend: two real ``rpc-server`` processes on 127.0.0.1.

The servers are built from the installed llama-cpp-python's own sources (once, into a cache
outside the clone: ``specchat.devtools.rpc_server``). Everything that registers a server runs in
a child process: llama.cpp keeps a registered server for the life of the process, and a server
that is gone when a later test reads the device list would end this one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from specchat.devtools import rpc_server
from specchat.engine.llama import rpc
from specchat.engine.llama.rpc import NO_RPC, parse_endpoints, probe
from specchat.errors import SpecchatError

REPO = Path(__file__).resolve().parent.parent


def test_endpoints_are_checked() -> None:
    assert parse_endpoints("a:1, b.local:50052") == ("a:1", "b.local:50052")
    assert parse_endpoints(["10.0.0.2:50052"]) == ("10.0.0.2:50052",)
    assert parse_endpoints("") == ()
    for bad in ("nohost", "a:", ":50052", "a:port", "a:70000", "a:1,a:1"):
        with pytest.raises(SpecchatError, match="HOST:PORT|named twice"):
            parse_endpoints(bad)


def test_an_unreachable_server_is_said_so_without_a_crash() -> None:
    info = probe(f"127.0.0.1:{rpc_server.free_port()}")
    assert not info.reachable and "connection refused" in info.error


def test_the_config_file_takes_rpc_servers(tmp_path: Path) -> None:
    from specchat.config import load_config
    from specchat.errors import ConfigError

    f = tmp_path / "config.yaml"
    f.write_text("rpc: [192.168.1.20:50052, 192.168.1.21:50052]\n")
    assert load_config(f).rpc == ("192.168.1.20:50052", "192.168.1.21:50052")
    f.write_text("rpc: 192.168.1.20\n")
    with pytest.raises(ConfigError, match="setting 'rpc' is wrong: '192.168.1.20' is not HOST:PORT"):
        load_config(f)


# ---------------------------------------------------------------------------- with servers

needs_rpc = pytest.mark.skipif(not rpc.available(), reason=NO_RPC)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, ...]]:
    try:
        binary = rpc_server.build()
    except (subprocess.CalledProcessError, StopIteration) as e:
        log = rpc_server.binary_path().parent / "build.log"
        tail = log.read_text()[-3000:] if log.exists() else ""
        pytest.fail(f"could not build rpc-server ({e}):\n{tail}")
    ports = [rpc_server.free_port() for _ in range(2)]
    procs = [rpc_server.start(binary, p) for p in ports]
    yield tuple(f"127.0.0.1:{p}" for p in ports)
    for p in procs:
        p.terminate()
        p.wait(10)


def child(code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)


def specchat(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPECCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "specchat", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


GREEDY_CHILD = """
    import json, sys
    from specchat.engine.decode.events import RejectedEvent, StepEvent, TokenEvent
    from specchat.engine.decode.plain import PlainDecoder
    from specchat.engine.decode.sampling import SamplerSettings
    from specchat.engine.decode.speculative import SpeculativeDecoder
    from specchat.engine.decode.step_policy import FixedGamma
    from specchat.engine.llama.model import LlamaModel
    from specchat.engine.llama.context import LlamaContext
    from specchat.engine.llama.model_settings import ContextSettings, ModelSettings
    import threading

    target_path, draft_path, servers = sys.argv[1], sys.argv[2], tuple(sys.argv[3].split(","))
    cs = ContextSettings(n_ctx=512, n_threads=1)
    target = LlamaModel(target_path, ModelSettings(rpc=servers) if servers[0] else ModelSettings())
    draft = LlamaModel(draft_path)
    out = {"target_buffers": [b.device for b in target.load_report.buffers],
           "draft_buffers": [b.device for b in draft.load_report.buffers], "runs": []}
    greedy = SamplerSettings(temperature=0, max_tokens=40)
    for text in ("hello there", "the cat sat", "0123 abc"):
        prompt = target.tokenize(text)
        plain = [e.token_id for e in PlainDecoder(LlamaContext(target, cs)).run(
            prompt, greedy, threading.Event()) if isinstance(e, TokenEvent)]
        events = list(SpeculativeDecoder(LlamaContext(target, cs), LlamaContext(draft, cs),
                                         FixedGamma(3)).run(prompt, greedy, threading.Event()))
        out["runs"].append({
            "plain": plain, "spec": [e.token_id for e in events if isinstance(e, TokenEvent)],
            "drafted": sum(e.gamma for e in events if isinstance(e, StepEvent)),
            "rejected": sum(isinstance(e, RejectedEvent) for e in events)})
    print(json.dumps(out))
"""


@needs_rpc
def test_greedy_over_two_servers_is_token_identical_to_a_local_run(
        servers: tuple[str, ...], tiny_target: Path, tiny_draft: Path) -> None:
    remote = child(GREEDY_CHILD, str(tiny_target), str(tiny_draft), ",".join(servers))
    assert remote.returncode == 0, remote.stderr[-3000:]
    local = child(GREEDY_CHILD, str(tiny_target), str(tiny_draft), "")
    assert local.returncode == 0, local.stderr[-3000:]
    r, loc = json.loads(remote.stdout), json.loads(local.stdout)
    # The target's weights are on both servers; the draft's stay here.
    for ep in servers:
        assert any(ep in d for d in r["target_buffers"]), r["target_buffers"]
    assert not any("RPC" in d for d in r["draft_buffers"]), r["draft_buffers"]
    assert not any("RPC" in d for d in loc["target_buffers"])
    for rr, lr in zip(r["runs"], loc["runs"], strict=True):
        assert rr["spec"] == rr["plain"] == lr["plain"] == lr["spec"]
        assert rr["plain"]
    assert sum(x["drafted"] for x in r["runs"]) > 20
    assert sum(x["rejected"] for x in r["runs"]) > 0  # drafts were made and some turned down


@needs_rpc
def test_sampling_over_the_servers_is_exact(servers: tuple[str, ...], tiny_target: Path,
                                            tiny_draft: Path, tmp_path: Path) -> None:
    """``specchat prove`` with the target on the servers: χ² between speculative and plain
    samples, with drafts made and rejected (else prove says INCONCLUSIVE, exit code 3)."""
    done = specchat("prove", "--model", str(tiny_target), "--draft", str(tiny_draft),
                    "--rpc", ",".join(servers), "--samples", "400", "--seed", "3",
                    "--threads", "1", home=tmp_path)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr[-2000:]
    rejected = re.search(r"(\d+) rejected", done.stdout)
    assert rejected and int(rejected.group(1)) > 50, done.stdout


@needs_rpc
def test_doctor_shows_each_server_and_counts_its_memory(servers: tuple[str, ...],
                                                        tiny_target: Path, tiny_draft: Path,
                                                        tmp_path: Path) -> None:
    down = f"127.0.0.1:{rpc_server.free_port()}"
    done = specchat("doctor", "--model", str(tiny_target), "--draft", str(tiny_draft),
                    "--rpc", ",".join([*servers, down]), home=tmp_path)
    out = done.stdout
    for ep in servers:
        assert re.search(rf"{re.escape(ep)}\s+reachable, 1 device, [\d.]+ [GM]B free of", out), out
    assert re.search(rf"{re.escape(down)}\s+NOT reachable: connection refused", out), out
    assert "layers on RPC servers" in out and "RPC servers ~" in out, out
    assert done.returncode == 1  # a server that cannot be used is a problem


DROP_CHILD = """
    import os, signal, sys, threading
    from specchat.engine.decode.events import TokenEvent
    from specchat.engine.decode.plain import PlainDecoder
    from specchat.engine.decode.sampling import SamplerSettings
    from specchat.engine.llama import rpc
    from specchat.engine.llama.model import LlamaModel
    from specchat.engine.llama.context import LlamaContext
    from specchat.engine.llama.model_settings import ContextSettings, ModelSettings

    target_path, server, pid, listen = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    model = LlamaModel(target_path, ModelSettings(rpc=(server,)))
    ctx = LlamaContext(model, ContextSettings(n_ctx=512, n_threads=1))
    told = threading.Event()
    if listen == "1":  # as the app does: told on llama.cpp's thread, which is then parked
        rpc.on_failure(lambda msg: (print("TOLD:", msg, flush=True), told.set()))

    def reply():
        settings = SamplerSettings(temperature=1.0, seed=1, max_tokens=400)
        for i, e in enumerate(PlainDecoder(ctx).run(model.tokenize("hi"), settings,
                                                    threading.Event())):
            if isinstance(e, TokenEvent):
                print("TOKEN", e.token_id, flush=True)
                if i == 5:
                    os.kill(pid, signal.SIGKILL)  # the server drops mid-reply

    worker = threading.Thread(target=reply, daemon=True)
    worker.start()
    if listen == "1":
        told.wait(60)
        print("STILL RUNNING", flush=True)
        os._exit(0)
    worker.join()
"""


@needs_rpc
@pytest.mark.parametrize("listen", ["0", "1"], ids=["no-listener", "app-listener"])
def test_a_server_that_drops_mid_reply_gives_a_clear_message(tiny_target: Path,
                                                             listen: str) -> None:
    binary = rpc_server.build()
    port = rpc_server.free_port()
    proc = rpc_server.start(binary, port)
    try:
        done = child(DROP_CHILD, str(tiny_target), f"127.0.0.1:{port}", str(proc.pid), listen,
                     timeout=120)
    finally:
        proc.kill()
        proc.wait(10)
    out = done.stdout
    assert out.count("TOKEN") >= 3, out + done.stderr[-2000:]  # what was written is there
    said = f"the RPC server at 127.0.0.1:{port} stopped answering mid-reply"
    if listen == "1":
        assert done.returncode == 0 and "STILL RUNNING" in out and f"TOLD: {said}" in out, \
            out + done.stderr[-2000:]
    else:
        assert done.returncode == 75, out + done.stderr[-2000:]
        assert f"specchat: {said}" in done.stderr and "what was written is kept" in done.stderr


def test_a_build_without_rpc_says_how_to_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc, "available", lambda: False)
    with pytest.raises(rpc.RpcError, match='CMAKE_ARGS="-DGGML_RPC=on"'):
        rpc.connect(("127.0.0.1:50052",))


def test_ask_with_an_unreachable_server_is_refused_before_loading(tiny_target: Path,
                                                                  tmp_path: Path) -> None:
    port = rpc_server.free_port()
    done = specchat("ask", "hi", "--model", str(tiny_target), "--rpc", f"127.0.0.1:{port}",
                    home=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert (f"the RPC server at 127.0.0.1:{port} cannot be used: connection refused"
            in done.stderr or NO_RPC in done.stderr), done.stderr
