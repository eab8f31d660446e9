"""The sampled, budgeted LLM judge (docs/judge.md): prompts, parsing and sampling
are pure; `client` and `service` do the I/O."""
