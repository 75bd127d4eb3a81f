"""The commands an operator reaches for, one module each: `signoff pending`, `audit`,
`deadletters`, `migrate` (`doctor` is `signoff.doctor`); `signoff.cli` parses their arguments
and calls them.

Each reads (or, for dead letters and the migration, changes) the same Redis the bot and runner
use, through the same `Store`; nothing here talks to a running process.

What they print is whole and safe to print (`printing`): `pending` lists every pending approval
(read a page at a time, never cut at a count), and text that agents, Slack or another
writer of a stream put in Redis reaches the terminal with its control and invisible
characters escaped (a terminal obeys ESC sequences), whatever its bytes.
"""
