"""Heads trained on this machine for a GGUF target: Medusa-1 heads (and, later, Kangaroo's
adapter), with numpy only.

- :mod:`.store`: where they live — ``<data>/heads/<sha256[:16]>/`` per target file, keyed by
  the file's sha256 (remembered per path, size and mtime so it is hashed once); atomic writes;
  heads for another file refused.
- :mod:`.output_matrix`: the target's frozen output matrix (rows of it) read from its GGUF with
  the ``gguf`` package, dequantized.
- :mod:`.data`: training data — the target prefilled over text (Spec-Bench prompts plus its own
  greedy replies, generated once and cached; or a text file), keeping per position the hidden
  state and the target's top next tokens.
- :mod:`.medusa`: training K Medusa heads and measuring them on held-out text.
- :mod:`.budget`: the time-budgeted training loop Medusa's heads and Kangaroo's adapter share.
"""
