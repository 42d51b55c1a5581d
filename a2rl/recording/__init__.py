"""What a run records about its agent, outside the agent's reach: transcripts (token use), code snapshots
at every submission, and the workspace archive."""
