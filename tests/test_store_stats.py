"""Typed reply stats in the store, and the migration of the stats that schema 1 wrote.

``fixtures/chats-v1.sqlite3`` was written by specchat's own app at schema version 1 (commit
211a952), run headless on the suite's tiny models: a two-turn speculative chat (γ 3, T 0.8), a
plain reply and a plain reply stopped with Esc. It is the database a user of that release has.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from specchat.engine.decode.events import BatchTiming, GenerationStats, SpecDetail
from specchat.store import ChatStore, ReplyStats, chat_to_markdown
from specchat.store.schema import SCHEMA_VERSION, user_version
from specchat.store.stats import STATS_VERSION, upgrade_v1

FIXTURE = Path(__file__).parent / "fixtures" / "chats-v1.sqlite3"


def v1_database(tmp_path: Path) -> Path:
    path = tmp_path / "chats.sqlite3"
    shutil.copy(FIXTURE, path)
    return path


def rows(path: Path) -> list[tuple[int, str, str, str | None, str | None, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT id, role, content, fates, stats, status FROM messages "
                            "ORDER BY id").fetchall()
    finally:
        conn.close()


def test_the_fixture_is_a_schema_1_database_with_every_kind_of_reply() -> None:
    conn = sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True)
    assert user_version(conn) == 1
    conn.close()
    stats = [json.loads(r[4]) for r in rows(FIXTURE) if r[4]]
    assert {s["decoder"] for s in stats} == {"speculative", "plain"}
    assert any(s["extra"].get("overlap_n") for s in stats)  # sampled: Σ min(p, q) was kept
    assert {s["stop_reason"] for s in stats} >= {"length", "cancelled"}


def test_an_existing_chats_database_opens_and_its_stats_convert(tmp_path: Path) -> None:
    path = v1_database(tmp_path)
    before = rows(path)
    store = ChatStore.open(path)
    assert user_version(store.conn) == SCHEMA_VERSION
    messages = [m for c in store.list_chats() for m in store.messages(c.id)]
    assert len(messages) == len(before) == 8
    old = {r[0]: r for r in before}
    for m in messages:
        _, role, content, fates, stats_text, status = old[m.id]
        assert (m.role, m.content, m.fates, m.status) == (role, content, fates, status)
        if stats_text is None:
            assert m.stats is None
            continue
        v1 = json.loads(stats_text)
        assert m.stats is not None
        g, x = m.stats.generation, m.stats.generation.detail
        for key in ("prompt_tokens", "cached_tokens", "generated_tokens", "prompt_s", "ttft_s",
                    "decode_s", "total_s", "stop_reason", "steps", "drafted", "accepted",
                    "rejections", "draft_s", "verify_s", "target_forwards", "decode_tps",
                    "e2e_tps", "alpha", "tau"):
            assert getattr(g, key) == v1[key], key
        for key in ("decoder", "gamma", "gamma_mode", "ctx_size", "pair"):
            assert getattr(m.stats, key) == v1[key], key
        extra = v1["extra"]
        assert list(x.position_drafted) == extra.get("position_drafted", [])
        assert list(x.position_accepted) == extra.get("position_accepted", [])
        assert list(x.acceptance_by_position) == extra.get("acceptance_by_position", [])
        assert x.overlap_mean == extra.get("overlap_mean")
        assert x.overlap_n == extra.get("overlap_n", 0)
        assert x.overhead_share == pytest.approx(extra.get("overhead_share"))
        assert dict(x.steps_by_drafter) == extra.get("steps_by_drafter", {})
        assert {str(b.size): b.count for b in x.verify_batches} == extra.get("verify_n_by_batch", {})
        assert {str(b.size): b.ms for b in x.verify_batches} == extra.get("verify_ms_by_batch", {})
    store.close()
    # Converted once: opening again changes nothing, and each cell says its version.
    after = rows(path)
    ChatStore.open(path).close()
    assert rows(path) == after
    assert {json.loads(r[4])["version"] for r in after if r[4]} == {STATS_VERSION}


def test_a_converted_chat_exports_with_its_figures(tmp_path: Path) -> None:
    store = ChatStore.open(v1_database(tmp_path))
    first = min(store.list_chats(), key=lambda c: c.id)
    md = chat_to_markdown(first, store.messages(first.id))
    assert "## Assistant (30 tokens, " in md and " tok/s decode, α " in md


def test_a_damaged_stats_cell_costs_its_numbers_not_the_message(tmp_path: Path) -> None:
    path = v1_database(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE messages SET stats = '{\"extra\": [1, 2' WHERE id = 2")  # cut short
    conn.execute("UPDATE messages SET stats = '{\"extra\": {\"verify_ms_by_batch\": 5}}' "
                 "WHERE id = 4")  # the wrong shape
    conn.commit()
    conn.close()
    store = ChatStore.open(path)
    by_id = {m.id: m for c in store.list_chats() for m in store.messages(c.id)}
    assert by_id[2].stats is None and by_id[4].stats is None
    assert by_id[2].content and by_id[4].content  # the messages themselves are whole
    assert by_id[6].stats is not None and by_id[6].stats.decoder == "plain"
    store.close()
    cells = {r[0]: r[4] for r in rows(path)}
    assert cells[2] == '{"extra": [1, 2'  # left as it was, not thrown away


def test_reply_stats_round_trip_through_the_store(tmp_path: Path) -> None:
    detail = SpecDetail(position_drafted=(3, 2), position_accepted=(2, 1), overlap_mean=0.5,
                        exact_match_alpha=0.4, overlap_n=5, draft_ms_per_token=1.5,
                        verify_batches=(BatchTiming(1, 2, 0.5), BatchTiming(4, 3, 1.25)),
                        steps_by_drafter={"ngram": 1, "model": 3},
                        drafted_by_drafter={"ngram": 2, "model": 3},
                        accepted_by_drafter={"ngram": 1, "model": 2}, step_s=0.2, llama_s=0.15)
    stats = ReplyStats(GenerationStats(prompt_tokens=9, generated_tokens=7, decode_s=0.3,
                                       steps=4, drafted=5, accepted=3, rejections=2,
                                       target_forwards=4, stop_reason="stop", detail=detail),
                       decoder="speculative", drafters=("ngram", "model"), gamma=3,
                       gamma_mode="auto · code", ctx_size=2048, pair="demo")
    store = ChatStore.open(tmp_path / "c.db")
    chat = store.create_chat("t")
    store.add_message(chat, "assistant", "x", stats=stats)
    (m,) = store.messages(chat)
    assert m.stats == stats
    # The per-drafter figures come back, in the order they were saved (the decoder's).
    assert list(m.stats.generation.detail.drafted_by_drafter) == ["ngram", "model"]
    assert m.stats.generation.detail.acceptance_by_position == (2 / 3, 0.5)
    assert m.stats.generation.detail.overhead_share == pytest.approx(0.25)


@pytest.mark.parametrize("bad", [
    ["not", "an", "object"],
    {"extra": "not a mapping"},
    {"generated_tokens": "seven"},
    {"extra": {"position_drafted": [1, "x"]}},
    {"extra": {"verify_ms_by_batch": {"a": 1.0}, "verify_n_by_batch": {"a": 1}}},
    {"gamma": "four"},
])
def test_upgrading_malformed_v1_stats_is_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        upgrade_v1(bad)


def test_stats_of_another_version_read_as_none() -> None:
    good = ReplyStats(GenerationStats(generated_tokens=3), decoder="plain")
    assert ReplyStats.from_json(good.to_json()) == good
    doc = json.loads(good.to_json())
    assert ReplyStats.from_json(json.dumps({**doc, "version": STATS_VERSION + 1})) is None
    assert ReplyStats.from_json(json.dumps({**doc, "version": 1})) is None
    assert ReplyStats.from_json("[]") is None and ReplyStats.from_json(None) is None
