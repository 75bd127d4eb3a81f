"""The shared core: what an approval is, how it is stored, decided and told, and the
process plumbing (settings, logs, metrics, health, background loops) both sides use.

It imports neither side: `bot/` (Slack) and `agent_runner/` (graphs) both build on it.
"""
