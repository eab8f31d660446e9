"""The sampled, budgeted LLM judge (DESIGN §5): prompts, parsing and sampling
are pure; `client` and `service` do the I/O."""
