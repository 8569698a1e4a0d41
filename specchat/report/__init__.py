"""Reports on disk: Markdown plus PNG charts, drawn without any imaging library."""
