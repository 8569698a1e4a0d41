"""Tools and files a conversation reaches: MCP servers (through the official ``mcp`` SDK), the
tools a turn offers and the user allows, the tool-calling loop around the engine, and files
attached to a message.

A layer beside the chat store and the server: the session and the command line import it;
nothing below does, and it never imports the terminal toolkit.
"""
