"""Chat persistence: SQLite with migrations, token fates, Markdown export. No UI code here."""

from specchat.store.chat_tools import ChatTools
from specchat.store.chats import ChatStore
from specchat.store.export import (
    chat_to_markdown,
    export_filename,
    protected_files,
    unused_path,
    write_export,
)
from specchat.store.fates import FateTrace, Segment
from specchat.store.records import ChatSummary, StoredMessage, title_from
from specchat.store.reply_format import ReplyFormat
from specchat.store.stats import ReplyStats
from specchat.store.tool_parts import CallRecord, ToolPart

__all__ = ["CallRecord", "ChatStore", "ChatSummary", "ChatTools", "FateTrace", "ReplyFormat",
           "ReplyStats", "Segment", "StoredMessage", "ToolPart", "chat_to_markdown",
           "export_filename", "protected_files", "title_from", "unused_path", "write_export"]
