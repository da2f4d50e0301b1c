"""Reward, losses (DRPO, GRPO), curriculum and the rollout buffer of the RL stage."""
