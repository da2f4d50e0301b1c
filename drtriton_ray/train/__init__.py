"""Training: SFT warm start (Ray Train) and, later, the RL trainer."""
