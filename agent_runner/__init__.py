"""Signoff's agent side: runs graphs on Redis, reports pauses, resumes them.

Nothing here imports Slack.
"""
