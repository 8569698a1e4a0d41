"""Command-line interface. UI modules are imported only by the commands that open the app."""
