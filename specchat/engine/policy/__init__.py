"""How much to speculate: γ policies, the planner, and the cost and acceptance models they use.

The planner (``planner*``) chooses per step the drafter and the shape (chain, tree or a plain
step) from measured costs (``costs``, ``cost_model``) and measured acceptance (``acceptance``,
``tree_stats``, ``lookup_estimate``); ``auto_gamma`` and ``gamma`` are the simpler policies.
They implement :mod:`specchat.engine.decode.step_policy`; the decoder knows nothing else of them.
"""
