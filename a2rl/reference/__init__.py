"""The reference agent that ships with a2rl: `pipeline` (SFT then GRPO; `interactive` for environment tasks). The
agent stacks a sweep names are configs/agents/*.yaml, read by a2rl/spec/agents.py."""
