"""The post-run inspector: an LLM judge reads what a run did and answers a versioned rubric (inspect.py)."""
