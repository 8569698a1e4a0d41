"""Open what the user asked for — a pair or a single model — as loaded models and contexts.

This is the one place that turns catalog entries into a running engine, for the CLI, the app
and the benchmarks alike. :class:`~specchat.runtime.opening.Runtime` is that engine, built up
in layers, one module each:

- :mod:`.loaded`: the models and contexts it holds, where they run, what the user should know
  about how they were loaded, and closing them;
- :mod:`.policies`: the γ policies it hands out, and the learning controllers among them,
  seeded from the pair's calibration and saved for the next process;
- :mod:`.decoders`: the decoders it builds, and which drafters they run;
- :mod:`.opening`: opening a selection — fetching the models, checking they fit, loading them.
"""
