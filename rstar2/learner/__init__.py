"""The learner: SFT (stage 0), the GRPO-RoC policy update (one process or FSDP ranks) and
checkpoints. The RL controller that drives it through the graph is `rstar2.train.controller`
(executed by `rstar2.train.learner_actor`)."""
