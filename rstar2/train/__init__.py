"""`rstar2 train`: the resolved training config, the actor graph it runs, the run driver, and
the RL controller in that graph (`learner_actor.py`, with its synchronous `run_state.py`)."""
