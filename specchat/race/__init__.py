"""The race: one prompt answered by the same target plain and speculative, recorded one after
the other and replayed together in real time. No UI here."""
