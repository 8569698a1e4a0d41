"""Reports on disk: Markdown plus SVG charts, written as text without any imaging library."""
