"""Which earlier step of a process makes a model load crash: a bisection for the GPU check.

On the one NVIDIA machine specchat has run on (an H200, CUDA 13.0), a tiny model loaded with
every layer on the GPU in a fresh process, but crashed (SIGSEGV in llama.cpp's tokenizer, while
it compiles its regular expressions) in the test suite and in the GPU proof, which had done
other things first: imported more modules, written the GGUF file in the same process, asked
the devices for their memory. This script loads one tiny model in a new process after each
such step alone, so one run says which step it is:

    python scripts/gpu_load_bisect.py            # on the GPU machine (scripts/gpu_check.sh
                                                 # runs it when a load crashed)

Each line: the step, then ``ok`` or how the process ended (``signal 11``). Exit status 0.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

WRITE = ("from specchat.devtools.tiny_models import TinySpec, write_tiny_model\n"
         "write_tiny_model(Path(sys.argv[2]), TinySpec(seed=3), name='other')\n")
# What a crashing process had done before its load, one step at a time.
STEPS = {
    "nothing": "",
    "import numpy.random": "import numpy.random\n",
    "import hashlib, secrets": "import hashlib, secrets\n",
    "import gguf": "import gguf\n",
    "write a GGUF in this process": WRITE,
    "ask the devices' memory": ("from specchat.engine.llama.hardware import devices\n"
                                "devices(with_memory=True)\n"),
    "import specchat.runtime.opening": "import specchat.runtime.opening\n",
    "import the CLI": "import specchat.cli.main\n",
    "import pytest": "import pytest\n",
    "load the vocabulary first": (
        "from specchat.engine.llama.model import LlamaModel\n"
        "from specchat.engine.llama.model_settings import ModelSettings\n"
        "LlamaModel(sys.argv[1], ModelSettings(vocab_only=True))\n"),
    "all of the above": None,  # filled in below
}
LOAD = ("from specchat.engine.llama.model import LlamaModel\n"
        "from specchat.engine.llama.model_settings import ModelSettings\n"
        "m = LlamaModel(sys.argv[1], ModelSettings(n_gpu_layers=-1))\n"
        "r = m.load_report\n"
        "print(f'{r.offloaded_layers}/{r.offloadable_layers} layers on the GPU')\n")


def main() -> int:
    STEPS["all of the above"] = "".join(v for k, v in STEPS.items() if v)
    with tempfile.TemporaryDirectory(prefix="specchat-bisect-") as tmp:
        model = Path(tmp) / "tiny.gguf"
        made = subprocess.run([sys.executable, "-c", "import sys\nfrom pathlib import Path\n"
                               + WRITE.replace("sys.argv[2]", "sys.argv[1]"), str(model)],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        if made.returncode != 0:
            print(f"could not write the tiny model: {made.stderr.strip()[-300:]}")
            return 0
        for name, prelude in STEPS.items():
            code = "import sys\nfrom pathlib import Path\n" + (prelude or "") + LOAD
            try:
                r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code, str(model),
                                    str(Path(tmp) / "other.gguf")], cwd=REPO,
                                   capture_output=True, text=True, timeout=120)
                how = f"ok ({r.stdout.strip()})" if r.returncode == 0 else (
                    f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}")
                if r.returncode != 0:
                    how += f" ({r.stderr.strip().splitlines()[-1][:120] if r.stderr.strip() else ''})"
            except subprocess.TimeoutExpired:
                how = "timed out"
            print(f"{name:32s} {how}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
