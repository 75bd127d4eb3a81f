"""Signoff's Slack side: approval cards, modals and listeners.

Nothing here runs an agent; it talks to the runner through Redis.
"""
