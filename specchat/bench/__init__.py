"""``specchat bench``: plain vs speculative decoding over Spec-Bench prompts, headless."""
