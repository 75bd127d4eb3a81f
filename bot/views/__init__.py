"""What a person reads: cards and their words, modals, the plan, refusals, Markdown, text made safe (pure)."""
