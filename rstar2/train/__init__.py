"""`rstar2 train`: the resolved training config, the actor graph it runs, and the run driver."""
