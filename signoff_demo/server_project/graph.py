"""The demo agent as an Agent Server serves it: a compiled graph (the server keeps its checkpoints)."""

from signoff_demo.agent import build_demo_agent

demo = build_demo_agent()
