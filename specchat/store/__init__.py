"""Chat persistence: SQLite with migrations, token fates, Markdown export. No UI code here."""

from specchat.store.chats import ChatStore, ChatSummary, StoredMessage, title_from
from specchat.store.export import (
    chat_to_markdown,
    export_filename,
    protected_files,
    unused_path,
    write_export,
)
from specchat.store.fates import FateTrace, Segment
from specchat.store.reply_format import ReplyFormat
from specchat.store.stats import ReplyStats

__all__ = ["ChatStore", "ChatSummary", "FateTrace", "ReplyFormat", "ReplyStats", "Segment", "StoredMessage",
           "chat_to_markdown", "export_filename", "protected_files", "title_from",
           "unused_path", "write_export"]
