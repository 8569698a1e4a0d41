"""A chat's life without a screen: its turns, the reply in flight (generated in a worker
thread), and what is saved. Above the runtime and the store, below the UI; no Textual here."""
