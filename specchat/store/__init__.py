"""Chat persistence: SQLite with migrations, token fates, Markdown export. No UI code here."""

from specchat.store.chats import ChatStore, ChatSummary, StoredMessage, title_from
from specchat.store.export import chat_to_markdown, export_filename
from specchat.store.fates import FateTrace, Segment
from specchat.store.stats import ReplyStats

__all__ = ["ChatStore", "ChatSummary", "FateTrace", "ReplyStats", "Segment", "StoredMessage",
           "chat_to_markdown", "export_filename", "title_from"]
