"""The agent runtime: the ReAct loop, model backends and the tool registry."""
