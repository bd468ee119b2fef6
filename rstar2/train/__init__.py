"""`rstar2 train`: the resolved training config, the actor graph it runs, the run driver, and
the RL controller in that graph (`controller.py`, a synchronous state machine, executed by
`learner_actor.py` with the policy and checkpoints of `run_state.py`)."""
