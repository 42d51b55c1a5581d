"""Local driver LLMs: open-weight models a sweep serves to its agents (endpoint records, the server job, the
OpenAI-compatible chat server over a local model)."""
