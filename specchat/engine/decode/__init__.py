"""The decode core: from a tokenised prompt to committed tokens and their events.

The verification rule (``verify``), the sampler (``sampling``), the step types (``plan``,
``events``), the seams the loop calls — drafters (``drafting``, found by name in ``registry``)
and the γ policy (``step_policy``) —, and the loops themselves (``plain``, ``speculative``,
``chat``). It never imports a policy's internals or a drafter: they plug in through the seams.
"""
