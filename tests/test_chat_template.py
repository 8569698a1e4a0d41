"""Chat templates come from model files: they render like Jinja's sandbox does, and a hostile one
is refused with a sentence instead of hanging the process or taking gigabytes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specchat.devtools.tiny_models import CHATML_TEMPLATE, TinySpec, write_tiny_model
from specchat.engine.decode import chat_template
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.chat_template import ChatTemplate
from specchat.engine.decode.events import GenerationStats
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.errors import Cancelled, ModelFileError

CHAT = [Message("system", "Be brief."), Message("user", "hi there"),
        Message("assistant", "Hello!"), Message("user", "What is 2+2?")]

# The constructs real Hugging Face templates use: namespace flags, loop.* and slices, macros,
# string methods, filters, `~`, `+` and raise_exception.
RICH = """
{%- set ns = namespace(system='', n=0) -%}
{%- macro role_tag(r) -%}<|{{ r | upper }}|>{%- endmacro -%}
{%- if messages[0]['role'] == 'system' %}{% set ns.system = messages[0]['content'] %}{% endif -%}
{{ bos_token }}{% if ns.system %}[SYS]{{ ns.system | trim }}[/SYS]{% endif %}
{%- for m in messages[1:] if m.role != 'system' %}
{%- set ns.n = ns.n + 1 -%}
{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) -%}
{{ raise_exception('roles must alternate') }}
{%- endif -%}
{{ role_tag(m.role) ~ ' ' ~ m.content.strip() ~ ('\\n' if not loop.last else '') }}
{%- endfor -%}
{{ ' #' + ns.n|string }}{{ ' ' + (messages | map(attribute='role') | join(',')) }}
{{- ' ' ~ ('%s/%d' % ('x', 3)) ~ ' ' ~ '{}-{}'.format('a', 'b') ~ ' ' ~ ('=' * 5) -}}
{{- ' ' ~ ({'k': [1, 2]} | tojson) ~ ' ' ~ range(3) | list | length -}}
{%- if add_generation_prompt %}{{ role_tag('assistant') }}{% endif -%}
"""


def _plain(source: str, messages: list[Message]) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(source).render(
        messages=[m.as_dict() for m in messages], add_generation_prompt=True,
        bos_token="<s>", eos_token="</s>", raise_exception=lambda m: None)


@pytest.mark.parametrize("source", [CHATML_TEMPLATE, RICH], ids=["chatml", "rich"])
def test_renders_exactly_as_the_plain_sandbox(source: str) -> None:
    out = ChatTemplate(source, "<s>", "</s>").render(CHAT)
    assert out == _plain(source, CHAT)
    assert "<|ASSISTANT|>" in out or "<|im_start|>assistant" in out


def test_raise_exception_is_a_model_file_error() -> None:
    bad = [Message("system", "s"), Message("user", "a"), Message("user", "b")]
    with pytest.raises(ModelFileError, match="roles must alternate"):
        ChatTemplate(RICH, "<s>", "</s>").render(bad)


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",
    "{{ messages.__class__.__mro__[1].__subclasses__() }}",
    "{{ raise_exception.__globals__['os'] }}",
    "{{ messages.append(1) }}",
])
def test_the_sandbox_still_holds(source: str) -> None:
    with pytest.raises(ModelFileError, match="unsafe|not safely callable"):
        ChatTemplate(source, "", "").render(CHAT)


def test_nested_loops_stop_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "RENDER_SECONDS", 0.2)
    src = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(ModelFileError, match=r"chat template was stopped: it ran for more than"):
        ChatTemplate(src, "", "").render(CHAT)


@pytest.mark.parametrize("source", [
    "{% for x in range(100000) recursive %}{% if loop.depth < 3 %}{{ loop(range(100000)) }}"
    "{% endif %}{% endfor %}",
    "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
    "{% for i in range(100000) %}{{ range(100000) | sum }}{% endfor %}",
], ids=["recursive-loop", "macro-fan-out", "filter-in-loop"])
def test_other_unbounded_work_stops_at_the_deadline(source: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "RENDER_SECONDS", 0.2)
    with pytest.raises(ModelFileError, match="ran for more than"):
        ChatTemplate(source, "", "").render(CHAT)


@pytest.mark.parametrize("source", [
    "{% set s = 'x' * 300000000 %}{{ s | length }}",
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}",
    "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}",
    "{{ 'x' | center(1000000000) }}",
    "{{ 'x'.center(1000000000) | length }}",
    "{{ 'x'.ljust(10 ** 9) | length }}",
    "{{ '%999999999d' | format(1) }}",
    "{{ '%999999999d' % 1 }}",
    "{{ '{:>999999999}'.format(1) }}",
    "{{ 7 ** 1000000000 }}",
    "{{ ('x' * 100000) | replace('x', 'y' * 100000) }}",
    "{{ ('x' * 100000).replace('x', 'y' * 100000) }}",
    "{{ (['y' * 100000] * 100000) | join }}",
    "{{ ''.join(['y' * 100000] * 100000) }}",
    "{% set a = ['y' * 100000] %}{% set b = [a, a, a, a, a, a, a, a, a, a] %}"
    "{% set c = [b, b, b, b, b, b, b, b, b, b] %}{{ c | tojson | length }}",
    "{% set a = ['y' * 100000] %}{% set b = [a, a, a, a, a, a, a, a, a, a] %}"
    "{% set c = [b, b, b, b, b, b, b, b, b, b] %}{{ c }}",
    "{% macro f() %}{% for i in range(100000) %}" + "z" * 1000 + "{% endfor %}{% endmacro %}"
    "{{ f() | length }}",
    "{% for i in range(100000) %}" + "z" * 1000 + "{% endfor %}",
    "{{ lipsum(n=100000000) }}",
    "{{ '%*d' % (999999999, 1) }}",
    "{{ '{:{}}'.format(1, 999999999) }}",
    "{{ range(10) | slice(1000000000) | list }}",
    "{{ [1] | batch(1000000000, 'x') | list }}",
], ids=lambda s: s[:40])
def test_huge_values_are_refused_before_they_are_built(source: str) -> None:
    tracemalloc.start()
    try:
        # Refused by a size check — or, on a machine busy enough, by the time budget first:
        # either way before the value was built (the memory peak below).
        with pytest.raises(ModelFileError, match="chat template was stopped: it(s output passed"
                                                 "| builds| formats| ran for more than)"):
            ChatTemplate(source, "", "").render(CHAT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"peak {peak >> 20} MB"


def test_large_numbers_that_are_not_sizes_are_fine() -> None:
    src = ("{{ 'build %d on %s' % (20240101, 'x') }} {{ '%s-%05d' | format('id', 1717171717) }} "
           "{{ 'Today is 20240101: {} {:>8}'.format(1717171717, 'r') }} "
           "{{ (x | default(1717171717)) + 1 }} {{ 1717171717 * 2 }}")
    out = ChatTemplate(src, "", "").render(CHAT)
    assert out == _plain(src, CHAT)
    assert "build 20240101 on x" in out and "id-1717171717" in out and "3434343434" in out


def test_the_size_cap_grows_with_the_conversation() -> None:
    long = [Message("user", "y" * 2_000_000)]
    out = ChatTemplate(CHATML_TEMPLATE, "", "").render(long)
    assert len(out) > 2_000_000


def test_a_set_cancel_event_stops_the_render() -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        ChatTemplate(CHATML_TEMPLATE, "", "").render(CHAT, cancel=cancel)


def test_cancel_stops_a_running_hostile_render(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "RENDER_SECONDS", 600.0)
    t = ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                     "{% endfor %}", "", "")
    cancel = threading.Event()
    caught: list[BaseException] = []

    def render() -> None:
        try:
            t.render(CHAT, cancel=cancel)
        except BaseException as e:  # the test reports whatever came out
            caught.append(e)

    worker = threading.Thread(target=render, daemon=True)
    worker.start()
    cancel.set()
    worker.join(60)
    assert not worker.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], Cancelled)


@pytest.mark.parametrize("source", ["{% for %}", "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
                                    "x" * (chat_template.MAX_SOURCE_CHARS + 1)],
                         ids=["syntax", "nesting", "size"])
def test_a_template_that_cannot_compile_is_a_sentence(source: str) -> None:
    with pytest.raises(ModelFileError, match="chat template (does not compile|is .* long)"):
        ChatTemplate(source, "", "")


# ------------------------------------------------- a model file carrying a hostile template

NESTED = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
HUGE = "{% set s = 'x' * 300000000 %}{{ s }}"


@pytest.fixture(scope="module")
def hostile_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("templates")
    return {name: write_tiny_model(d / f"{name}.gguf", TinySpec(seed=1), chat_template=src)
            for name, src in (("nested", NESTED), ("huge", HUGE))}


def test_the_engine_stops_a_hostile_render_on_cancel(hostile_models: dict[str, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "RENDER_SECONDS", 600.0)
    model = LlamaModel(hostile_models["nested"])
    eng = ChatEngine(PlainDecoder(LlamaContext(model, ContextSettings(n_ctx=256, n_threads=1))))
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    events = list(eng.reply(CHAT, SamplerSettings(temperature=0, max_tokens=4), cancel))
    assert len(events) == 1 and isinstance(events[0], GenerationStats)
    assert events[0].stop_reason == "cancelled"


@pytest.mark.parametrize("name", ["nested", "huge"])
def test_ask_with_a_hostile_template_is_one_line(name: str, hostile_models: dict[str, Path],
                                                 tmp_path: Path) -> None:
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home")}
    r = subprocess.run([sys.executable, "-m", "specchat", "ask", "hi", "--model",
                        str(hostile_models[name]), "--max-tokens", "4"], capture_output=True,
                       text=True, env=env, timeout=120, check=False)
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("specchat: error: the model's chat template was stopped: it ")
    assert "Traceback" not in r.stderr
