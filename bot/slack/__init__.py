"""Talking to Slack: the Web API clients, each run's posts made once, pacing, the bot's Slack state,
the agent surfaces."""
