"""The learner: SFT (stage 0) and the GRPO-RoC RL learner with its checkpoints."""
