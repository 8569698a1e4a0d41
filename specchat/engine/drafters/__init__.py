"""Drafters: the plug-ins that propose the tokens a speculative step asks the target to check.

Each module here (not starting with ``_``) is one drafter: it defines ``NAME`` and
``build(env) -> Drafter | None`` and implements the ``Drafter`` protocol of
:mod:`specchat.engine.decode.drafting`; :mod:`specchat.engine.decode.registry` finds them by
name, so a new drafter is a new file. Modules whose name starts with ``_`` are helpers.
"""
