"""Screens and modals. The app pushes them; each returns a typed result where it has one."""
