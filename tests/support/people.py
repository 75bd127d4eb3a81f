"""The people of the tests: Slack user ids (Riley asks; Alice, Bob, Carol and the lead decide)."""

ALICE, BOB, CAROL, LEAD, RILEY = "U0ALICE", "U0BOB", "U0CAROL", "U0LEAD", "U0RILEY"
