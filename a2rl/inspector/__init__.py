"""The post-run inspector: an LLM judge reads what a run did and answers a versioned rubric (rubric.py) about the
run's material (material.py); inspection.py asks and records the verdicts."""
