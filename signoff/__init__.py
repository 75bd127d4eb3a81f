"""The process edge: the `signoff` command (bot, runner, serve, demo, redis, doctor and the
operator commands). It sits above everything else and nothing of Signoff imports it; your
graph may import `signoff.testing`, its fake model for `signoff try`.
"""
